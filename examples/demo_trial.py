r"""The demo's trial: a small classifier on synthetic data, with augmentation and dropout.

Each rank of a run is started by torchrun (``python -m detsamplers demo`` launches it from
the repository's root)::

    OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node=2 \
        examples/demo_trial.py --checkpoint-dir ckpt --max-batches 48 --resume

``--resume`` passes ``latest_checkpoint="auto"``, so the same command also survives
``torchrun --max-restarts=3`` and a relaunch after SIGTERM.

Every rank appends the dataset indices of its share of each global batch to
``<record-dir>/records-rank<r>.jsonl``, so the demo can rebuild the global batches.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.data as tud
from torch import nn

from detsamplers import MixSampler, ReproducibleShuffleSampler
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Epoch, LRScheduler, Trainer, Trial, TrialContext, init

__all__ = ["DemoTrial", "Points", "main", "mixture", "unwrapped"]


class Points(tud.Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Fixed points labelled by a hidden hyperplane; each read adds random jitter.

    ``first`` numbers the points from there (the index each read returns), so that the
    points of several datasets in a ``ConcatDataset`` keep distinct numbers.

    Examples:
        >>> data = Points(4)
        >>> x, y, index = data[2]
        >>> tuple(x.shape), int(y) in (0, 1), index
        ((8,), True, 2)
        >>> Points(4, seed=1, first=10)[2][2]
        12
    """

    def __init__(self, length: int, seed: int = 0, first: int = 0) -> None:
        self.first = first
        self.x = torch.randn(length, 8, generator=torch.Generator().manual_seed(seed))
        plane = torch.randn(8, generator=torch.Generator().manual_seed(12345))
        self.y = (self.x @ plane > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        jitter = 0.1 * torch.randn(8)  # drawn from the global RNG the loader seeds per batch
        return self.x[index] + jitter, self.y[index], self.first + index


def mixture(records: int, spec: dict[str, Any], per_slot: int, num_workers: int) -> DataLoader:
    """Two datasets of ``records // 2`` points mixed half and half (``--mixture``).

    ``spec["extra"]`` points, if any, are a third dataset appended last, and ``spec["plan"]``
    is the mixture's curriculum: ``[[start, weights], ...]`` (NOTE [ trial mixture ]). The
    points are numbered across the datasets, as the ``ConcatDataset`` indexes them.
    """
    half, extra = records // 2, int(spec.get("extra", 0))
    sizes = [half, records - half] + ([extra] if extra else [])
    data = [Points(n, seed=10 + k, first=sum(sizes[:k])) for k, n in enumerate(sizes)]
    parts = [ReproducibleShuffleSampler(range(n), seed=20 + k) for k, n in enumerate(sizes)]
    plan = [(int(start), list(w)) for start, w in spec.get("plan", [])]
    mix = MixSampler(parts, weights=[0.5, 0.5], seed=7, curriculum=plan)
    return DataLoader(
        tud.ConcatDataset(data), batch_size=per_slot, sampler=mix, num_workers=num_workers
    )


def unwrapped(model: nn.Module) -> nn.Module:
    """``model`` without its DDP wrapper."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


class DemoTrial(Trial):
    """An MLP with dropout, SGD with momentum, and a learning rate decayed every epoch."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))
        self.model = context.wrap_model(net)
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )
        decay = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.7)
        context.wrap_lr_scheduler(decay, LRScheduler.StepMode.STEP_EVERY_EPOCH)
        self.record_dir: str | None = context.hparams.get("record_dir")

    def build_training_data_loader(self) -> DataLoader:
        """Shuffled records, ``per_slot_batch_size`` per rank; or a mixture (``--mixture``)."""
        spec = self.context.hparams.get("mixture")
        per_slot = self.context.get_per_slot_batch_size()
        workers = self.context.get_hparam("num_workers")
        if spec is not None:
            return mixture(self.context.get_hparam("records"), spec, per_slot, workers)
        return DataLoader(
            Points(self.context.get_hparam("records")),
            batch_size=per_slot,
            shuffle=True,
            num_workers=workers,
        )

    def build_validation_data_loader(self) -> DataLoader:
        """Other points from the same plane."""
        return DataLoader(Points(64, seed=1), batch_size=16)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """One SGD step; records the batch's indices."""
        x, y, index = batch
        logits = self.model(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        if self.record_dir is not None:
            rank = self.context.distributed.get_rank()
            line = {"batch": batch_idx, "rank": rank, "indices": index.tolist()}
            with open(os.path.join(self.record_dir, f"records-rank{rank}.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
        return {"loss": loss, "accuracy": (logits.argmax(1) == y).float().mean()}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Loss and accuracy on one validation batch."""
        x, y, _ = batch
        logits = self.model(x)
        return {
            "validation_loss": nn.functional.cross_entropy(logits, y),
            "validation_accuracy": (logits.argmax(1) == y).float().mean(),
        }


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's arguments."""
    parser = argparse.ArgumentParser(description="One rank of the detsamplers demo run.")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--record-dir", default=None)
    parser.add_argument("--max-batches", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=8)
    parser.add_argument(
        "--global-batch-size",
        type=json.loads,
        default=16,
        help='an int, or a JSON schedule such as "[[0, 16], [96, 32]]"',
    )
    parser.add_argument("--records", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument(
        "--resume", action="store_true", help='latest_checkpoint="auto": the newest, if any'
    )
    parser.add_argument("--stop-check-period", type=int, default=None)
    parser.add_argument("--weights-out", default=None, help="rank 0 saves the final weights")
    parser.add_argument("--test-mode", action="store_true")
    parser.add_argument(
        "--dataset-growth", action="store_true", help="fit(dataset_growth=True): --records may grow"
    )
    parser.add_argument(
        "--mixture",
        type=json.loads,
        default=None,
        help='train on a mixture of two halves of --records: \'{"extra": 16, "plan": [[48, '
        "[1, 1, 1]]]}' appends 16 records as a third dataset entering at sample 48",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, trial_class: type[DemoTrial] = DemoTrial) -> None:
    """Train one rank of a demo run."""
    args = parse(argv)
    hparams = {
        "global_batch_size": args.global_batch_size,
        "lr": 0.1,
        "records": args.records,
        "num_workers": args.num_workers,
        "record_dir": args.record_dir,
    }
    if args.mixture is not None:
        hparams["mixture"] = args.mixture
    if args.record_dir is not None:
        os.makedirs(args.record_dir, exist_ok=True)
        rank = os.environ.get("RANK", "0")  # for the demo, which signals one rank
        with open(os.path.join(args.record_dir, f"pid-rank{rank}"), "w") as f:
            f.write(str(os.getpid()))
    with init(hparams=hparams, seed=args.seed) as context:
        trial = trial_class(context)
        stop_check = None if args.stop_check_period is None else Batch(args.stop_check_period)
        Trainer(trial, context).fit(
            max_length=Batch(args.max_batches),
            checkpoint_period=Batch(args.checkpoint_every),
            validation_period=Epoch(1),
            checkpoint_dir=args.checkpoint_dir,
            latest_checkpoint="auto" if args.resume else None,
            test_mode=args.test_mode,
            reporting_period=Batch(8),
            stop_check_period=stop_check,
            dataset_growth=args.dataset_growth,
        )
        if args.weights_out is not None and context.distributed.get_rank() == 0:
            torch.save(unwrapped(trial.model).state_dict(), args.weights_out)


if __name__ == "__main__":
    main()
