"""Lightning on a detsamplers loader: default Trainer settings, exact mid-epoch resume.

Two CPU processes (gloo on 127.0.0.1), a checkpoint every 3 optimizer steps, stop at 3::

    torchrun --nproc_per_node=2 examples/lightning_train.py --out run --max-steps 3

Resume from Lightning's own checkpoint on one process with the same global batch (the
loader's state is in the checkpoint; the stream continues at the saved sample)::

    torchrun --nproc_per_node=1 examples/lightning_train.py --out run --max-steps 8 \
        --batch-size 8 --resume run/checkpoints/step=3.ckpt

Each rank appends the record indices it trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from detsamplers.loader import DataLoader


class Records(torch.utils.data.Dataset[dict[str, Any]]):
    """``length`` records; each carries its index, so the run can count what it trained."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": torch.full((4,), float(index))}


class Data(L.LightningDataModule):
    def __init__(self, records: int, batch_size: int, num_workers: int) -> None:
        super().__init__()
        self.loader = DataLoader(
            Records(records), batch_size=batch_size, shuffle=True, seed=1, num_workers=num_workers
        )

    def train_dataloader(self) -> Any:
        # One rank's share of an endless shuffled stream; len() is this rank's batches per
        # pass, so Lightning's epochs are passes when the global batch divides the dataset.
        return self.loader.get_data_loader(
            repeat=True, num_replicas=self.trainer.world_size, rank=self.trainer.global_rank
        )


class Model(L.LightningModule):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.out = out

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        row = {"step": self.global_step, "indices": batch["index"].tolist()}
        with open(self.out / f"records-rank{self.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        return self.layer(batch["x"]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", default=None, help="a checkpoint of Lightning's")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        max_steps=args.max_steps,
        accumulate_grad_batches=args.accumulate,
        callbacks=[
            ModelCheckpoint(
                dirpath=args.out / "checkpoints",
                filename="{step}",
                every_n_train_steps=args.checkpoint_every,
                save_top_k=-1,
            )
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    data = Data(args.records, args.batch_size, args.num_workers)
    trainer.fit(Model(args.out), datamodule=data, ckpt_path=args.resume)


if __name__ == "__main__":
    main()
