"""HF ``transformers.Trainer`` on a detsamplers loader: resume mid-epoch in O(1), no replay.

``get_train_dataloader`` returns our loader (already split by process); a callback writes
the loader's state into each checkpoint folder, and a resume loads it back, with
``ignore_data_skip=True`` so that the Trainer does not replay the batches itself::

    torchrun --nproc_per_node=2 examples/hf_trainer_train.py --out run --max-steps 3
    torchrun --nproc_per_node=1 examples/hf_trainer_train.py --out run --max-steps 16 \
        --batch-size 8 --resume run/checkpoint-3

Each rank appends the record indices it trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from detsamplers.loader import DataLoader


class Records(torch.utils.data.Dataset[dict[str, Any]]):
    """``length`` records; each carries its index, so the run can count what it trained."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": torch.full((4,), float(index))}


class Model(torch.nn.Module):
    def __init__(self, records: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.records = records
        self.step = 0

    def forward(self, index: torch.Tensor, x: torch.Tensor) -> dict[str, torch.Tensor]:
        with open(self.records, "a") as f:
            f.write(json.dumps({"step": self.step, "indices": index.tolist()}) + "\n")
        return {"loss": self.layer(x).pow(2).mean()}


class LoaderState(TrainerCallback):
    """Write the loader's state into each checkpoint folder (rank 0's resumes every rank)."""

    def __init__(self, loader: Any, model: Model) -> None:
        self.loader = loader
        self.model = model

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.model.step = state.global_step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            (folder / "loader.json").write_text(json.dumps(self.loader.state_dict()))


class LoaderTrainer(Trainer):
    def __init__(self, *args: Any, train_loader: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.args.ignore_data_skip:
            # The loader resumes from its own state; the Trainer's skip would come on top.
            raise ValueError(
                "TrainingArguments.ignore_data_skip should be True with a detsamplers "
                "loader, but got False: the loader's state already resumes it, and the "
                "Trainer's own skip would skip the batches of the resumed epoch a second "
                "time; pass ignore_data_skip=True"
            )
        self.train_loader = train_loader

    def get_train_dataloader(self) -> Any:
        return self.train_loader  # already split by process: not prepared again


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", default=None, help="a checkpoint-<step> folder")
    args = parser.parse_args(argv)

    training = TrainingArguments(
        output_dir=str(args.out),
        max_steps=args.max_steps,
        save_strategy="steps",
        save_steps=args.checkpoint_every,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ignore_data_skip=True,  # the loader resumes itself, in O(1)
        learning_rate=0.01,
        ddp_find_unused_parameters=False,
    )
    data = DataLoader(
        Records(args.records),
        batch_size=args.batch_size,
        shuffle=True,
        seed=1,
        num_workers=args.num_workers,
    )
    train = data.get_data_loader(
        repeat=True, num_replicas=training.world_size, rank=training.process_index
    )
    if args.resume:
        train.load_state_dict(json.loads((Path(args.resume) / "loader.json").read_text()))
    args.out.mkdir(parents=True, exist_ok=True)
    model = Model(args.out / f"records-rank{training.process_index}.jsonl")
    trainer = LoaderTrainer(
        model=model,
        args=training,
        train_loader=train,
        callbacks=[LoaderState(train, model)],
    )
    trainer.train(resume_from_checkpoint=args.resume)


if __name__ == "__main__":
    main()
