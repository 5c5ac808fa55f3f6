"""The trial loop training from webdataset shards: pause, resume, and refused resumes.

The module is also the rank of the multi-process test, started by torchrun::

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 -m test_trial_webdataset \
        --urls 'shards/data-{000000..000006}.tar' --checkpoint-dir ckpt --record-dir rec \
        --max-batches 9     # then, on any number of ranks: --resume
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from trial_helpers import as_if_saved_by, identical, launch_runs, metrics

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.trial import Batch, Trainer, Trial, find_latest_checkpoint, init
from detsamplers.trial._context import TrialContext
from detsamplers.trial._demo import global_batches
from tests.webdataset.wds_helpers import COUNTS, TOTAL, make, noisy_label, write_shards

HPARAMS: dict[str, Any] = {"global_batch_size": 8, "data_seed": 7, "num_workers": 0}
BATCHES = 30  # 240 records: 3 epochs of 71, and part of a fourth


def augment(sample: dict[str, Any]) -> tuple[torch.Tensor, int, str]:
    """The 2x2 pixels plus noise from the global torch RNG (which the source seeds per batch)."""
    pixels = torch.from_numpy(np.asarray(sample["png"], dtype=np.float32)).flatten()
    return pixels + 0.1 * torch.randn(4), int(sample["cls"]) % 2, sample["__key__"]


class ShardTrial(Trial):
    """A small MLP with dropout, trained from the shards in ``hparams["urls"]``."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        self.model = context.wrap_model(net)
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        )
        self.seen: list[list[str]] = []
        self.inputs: list[torch.Tensor] = []
        self.epochs: list[int] = []
        self.validated: list[str] = []

    def source(self, repeat: bool) -> WebDatasetSource:
        hparams = self.context.get_hparams()
        return WebDatasetSource(
            hparams["urls"],
            seed=hparams["data_seed"],
            batch_size=hparams.get("source_batch_size", self.context.get_per_slot_batch_size()),
            decode="l",
            map=augment,
            shuffle_window=4,
            repeat=repeat,
            seeding=hparams.get("seeding", "batch"),
            parts=hparams.get("parts", 0),
        )

    def build_training_data_loader(self) -> WebDataLoader:
        repeat = self.context.get_hparams().get("repeat", True)
        return WebDataLoader(self.source(repeat), self.context.get_hparam("num_workers"))

    def build_validation_data_loader(self) -> WebDatasetSource:
        return self.source(repeat=False)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y, keys = batch
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        self.seen.append(list(keys))
        self.inputs.extend(x)
        self.epochs.append(epoch_idx)
        record_dir = self.context.get_hparams().get("record_dir")
        if record_dir is not None:
            rank = self.context.distributed.get_rank()
            line = {"batch": batch_idx, "rank": rank, "indices": list(keys)}
            with open(os.path.join(record_dir, f"records-rank{rank}.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        x, y, keys = batch
        self.validated.extend(keys)
        return {"validation_loss": nn.functional.cross_entropy(self.model(x), y)}


def run(checkpoint_dir: Path, batches: int, *, resume: bool = False, **hparams: Any) -> ShardTrial:
    """Train the trial in this process (one rank) to ``batches`` and return it."""
    with init(hparams={**HPARAMS, **hparams}, seed=1) as context:
        trial = ShardTrial(context)
        latest = find_latest_checkpoint(str(checkpoint_dir)) if resume else None
        Trainer(trial, context).fit(
            Batch(batches),
            checkpoint_period=Batch(5),
            validation_period=Batch(BATCHES),
            checkpoint_dir=str(checkpoint_dir),
            latest_checkpoint=latest,
            reporting_period=Batch(10),
        )
    return trial


def weights(trial: ShardTrial) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trial.model.state_dict().items()}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="module")
def straight(shards: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[ShardTrial, Path]:
    """An uninterrupted run of ``BATCHES`` batches, and its checkpoint directory."""
    checkpoint_dir = tmp_path_factory.mktemp("straight")
    return run(checkpoint_dir, BATCHES, urls=shards), checkpoint_dir


def test_a_run_paused_and_resumed_sees_the_batches_and_ends_with_the_weights_of_a_straight_run(
    shards: str, straight: tuple[ShardTrial, Path], tmp_path: Path
) -> None:
    reference, _ = straight
    first = run(tmp_path, 13, urls=shards)
    assert find_latest_checkpoint(str(tmp_path)).endswith("batch-000013")  # type: ignore[union-attr]
    second = run(tmp_path, BATCHES, resume=True, urls=shards)
    assert len(second.seen) == BATCHES - 13
    assert first.seen + second.seen == reference.seen
    assert first.epochs + second.epochs == reference.epochs
    assert identical(weights(second), weights(reference))


@pytest.mark.workers
def test_a_run_resumed_with_workers_sees_the_batches_of_a_straight_run(
    shards: str, straight: tuple[ShardTrial, Path], tmp_path: Path
) -> None:
    # The batches and their map-stage draws do not depend on num_workers. The training
    # step's dropout does: with num_workers=0 the main process fetched, so its RNGs
    # followed each batch's stream (NOTE [ per-batch seeding ]); with workers they do not.
    reference, _ = straight
    first = run(tmp_path, 13, urls=shards)
    second = run(tmp_path, BATCHES, resume=True, urls=shards, num_workers=2)
    assert first.seen + second.seen == reference.seen
    assert first.epochs + second.epochs == reference.epochs


def test_epoch_idx_counts_records_consumed_and_each_epoch_sees_every_sample_once(
    straight: tuple[ShardTrial, Path],
) -> None:
    reference, _ = straight
    assert reference.epochs == [b * 8 // TOTAL for b in range(BATCHES)]
    stream = [key for keys in reference.seen for key in keys]
    every = sorted(f"s{s}-{j:03d}" for s, count in enumerate(COUNTS) for j in range(count))
    for epoch in range(len(stream) // TOTAL):
        assert sorted(stream[epoch * TOTAL : (epoch + 1) * TOTAL]) == every
    assert stream[:8] != every[:8]  # the shards and windows are shuffled


def test_validation_from_a_source_reads_every_sample_once(
    straight: tuple[ShardTrial, Path],
) -> None:
    reference, checkpoint_dir = straight
    assert len(reference.validated) == TOTAL == len(set(reference.validated))
    rows = [row for row in metrics(str(checkpoint_dir)) if row["type"] == "validation"]
    assert [row["batches_trained"] for row in rows] == [BATCHES]


def test_the_checkpoint_holds_the_sources_position_and_digests(
    straight: tuple[ShardTrial, Path],
) -> None:
    _, checkpoint_dir = straight
    folder = checkpoint_dir / f"batch-{BATCHES:06d}"
    metadata = json.loads((folder / "metadata.json").read_text())
    state = torch.load(folder / "rank-0.pth", weights_only=True)["loader"]
    assert state["position"] == BATCHES * 8
    assert state["counts"]["shards"] == len(COUNTS)
    assert state["counts"]["samples"] == TOTAL
    assert metadata["dataset_length"] == TOTAL
    assert metadata["data_seed"] == 7
    assert metadata["records_consumed"] == BATCHES * 8
    assert metadata["data_fingerprint"] == state["fingerprint"]
    assert metadata["data_digest"] == state["digest"] == metadata["data_global_digest"]


def resume_copy(straight: tuple[ShardTrial, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "ckpt"
    shutil.copytree(straight[1], copy)
    return copy


def test_a_resume_with_another_data_seed_is_refused(
    shards: str, straight: tuple[ShardTrial, Path], tmp_path: Path
) -> None:
    copy = resume_copy(straight, tmp_path)
    with pytest.raises(ReproducibilityError, match="data_seed is 7 in the checkpoint but 8 here"):
        run(copy, BATCHES + 1, resume=True, urls=shards, data_seed=8)


def test_a_resume_with_another_global_batch_size_continues_at_the_sample_reached(
    shards: str, straight: tuple[ShardTrial, Path], tmp_path: Path
) -> None:
    copy = resume_copy(straight, tmp_path)  # 30 batches of 8: samples 0-239
    resumed = run(copy, BATCHES + 4, resume=True, urls=shards, global_batch_size=9)
    source = WebDatasetSource(
        shards, seed=7, batch_size=36, decode="l", map=augment, shuffle_window=4,
        skip_samples=BATCHES * 8,
    )  # fmt: skip
    expected = list(next(iter(source))[2])  # the next 36 samples of the stream
    assert [key for keys in resumed.seen for key in keys] == expected
    # NOTE [ epoch length ]: epochs of 9 batches of 8 (72 samples) end at batches 9, 18 and
    # 27; epoch 3 began at sample 216 and lasts until it holds 71 samples (sample 287), so
    # the four batches of 9 (samples 240-275) are all in it.
    assert -(-TOTAL // 8) * 8 * 3 == 216 and BATCHES * 8 + 36 < 216 + TOTAL
    assert resumed.epochs == [3, 3, 3, 3]
    metadata = json.loads((copy / f"batch-{BATCHES + 4:06d}" / "metadata.json").read_text())
    assert (metadata["samples_trained"], metadata["global_batch_size"]) == (BATCHES * 8 + 36, 9)


@pytest.mark.parametrize("world_size", [1, 2], ids=["same-world-size", "other-world-size"])
def test_a_resume_from_shards_rewritten_with_other_counts_is_refused(
    straight: tuple[ShardTrial, Path], tmp_path: Path, world_size: int
) -> None:
    copy = resume_copy(straight, tmp_path)
    if world_size != 1:  # as if saved by 2 ranks: the world-size-free digest is checked
        as_if_saved_by(copy / f"batch-{BATCHES:06d}", world_size)
    swapped = [COUNTS[1], COUNTS[0], *COUNTS[2:]]  # same names, same total
    urls = write_shards(tmp_path / "rewritten", swapped)
    match = (
        "had 3 samples when the state was saved but has 20 now"
        if world_size == 1
        else ("data_global_digest is")
    )
    with pytest.raises(ReproducibilityError, match=match):
        run(copy, BATCHES + 1, resume=True, urls=urls)


def test_a_source_whose_batch_size_is_not_the_per_slot_batch_size_is_refused(
    shards: str, tmp_path: Path
) -> None:
    with pytest.raises(
        ValueError,
        match=r"WebDatasetSource from build_training_data_loader should be "
        r"context.get_per_slot_batch_size\(\)=8, but got batch_size=3",
    ):
        run(tmp_path, 1, urls=shards, source_batch_size=3)


def test_a_training_source_that_does_not_repeat_is_refused(shards: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="should have repeat=True, but got repeat=False"):
        run(tmp_path, 1, urls=shards, repeat=False)


def test_dataset_growth_over_a_source_is_refused(shards: str, tmp_path: Path) -> None:
    with init(hparams={**HPARAMS, "urls": shards}, seed=1) as context:
        trainer = Trainer(ShardTrial(context), context)
        with pytest.raises(
            ValueError,
            match=r"^dataset_growth=True needs a map-style detsamplers.loader.DataLoader with "
            r"shuffle=True, but build_training_data_loader returned a WebDatasetSource",
        ):
            trainer.fit(Batch(1), checkpoint_dir=str(tmp_path), dataset_growth=True)


def test_iterating_a_web_data_loader_without_a_map_leaves_the_global_torch_rng_alone(
    shards: str,
) -> None:
    # torch draws a base seed per iter(); it must come from the loader's own generator.
    # (With a decoder or map the main process is seeded per batch: NOTE [ per-batch
    # seeding ].)
    loader = WebDataLoader(WebDatasetSource(shards, seed=0, batch_size=2, collate_fn=list))
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    next(iter(loader))
    assert torch.equal(torch.rand(3), expected)


def main(argv: Sequence[str] | None = None) -> None:
    """One rank of the multi-process test (see the module docstring)."""
    parser = argparse.ArgumentParser()
    for name in ("--urls", "--checkpoint-dir", "--record-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-batches", type=int, default=20)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--parts", type=int, default=0)
    args = parser.parse_args(argv)
    os.makedirs(args.record_dir, exist_ok=True)
    hparams = {**HPARAMS, "urls": args.urls, "record_dir": args.record_dir, "parts": args.parts}
    with init(hparams=hparams, seed=1) as context:
        latest = find_latest_checkpoint(args.checkpoint_dir) if args.resume else None
        Trainer(ShardTrial(context), context).fit(
            Batch(args.max_batches),
            checkpoint_period=Batch(4),
            checkpoint_dir=args.checkpoint_dir,
            latest_checkpoint=latest,
            reporting_period=Batch(10),
        )


@pytest.fixture(scope="module")
def two_then_one(shards: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs paused at 9 on 2 ranks and resumed on 1 (``work/NAME/{first,second,ckpt}``):
    ``plain`` with the default parts, ``parts`` with parts=12; one launch runs both firsts
    (tests/trial/in_one_launch.py), and the resumes on 1 rank run in this process (a resume
    on 1 rank under torchrun is the demo's, tests/trial/test_trial_distributed.py)."""
    work = tmp_path_factory.mktemp("two-then-one")
    extras = {"plain": [], "parts": ["--parts=12"]}

    def argv(key: str, name: str, *more: str) -> list[str]:
        folders = [f"--checkpoint-dir={work / key / 'ckpt'}", f"--record-dir={work / key / name}"]
        return [f"--urls={shards}", *folders, *more]

    runs = [{"argv": argv(key, "first", "--max-batches=9", *more)} for key, more in extras.items()]
    launch_runs(2, runs, work / "launch-first", module="test_trial_webdataset")
    for key, more in extras.items():
        main(argv(key, "second", "--resume", *more))
    return work


@pytest.mark.distributed
def test_two_ranks_paused_and_resumed_on_one_see_the_global_batches_of_a_straight_run(
    straight: tuple[ShardTrial, Path], two_then_one: Path
) -> None:
    # Global batch t is the stream positions [8 t, 8 t + 8) on any world size, so the
    # uninterrupted reference is the in-process run (one rank of 8).
    first = global_batches(str(two_then_one / "plain" / "first"), 2)
    second = global_batches(str(two_then_one / "plain" / "second"), 1)
    assert sorted(first) == list(range(9))  # paused at 9, the last checkpoint
    assert sorted(second) == list(range(9, 20))
    reference, _ = straight
    assert [first.get(b) or second[b] for b in range(20)] == reference.seen[:20]


def test_a_source_with_the_default_parts_resumes_a_run_saved_with_parts_in_its_order(
    shards: str, tmp_path: Path
) -> None:
    # NOTE [ parts chosen at load ]: parts=None over local shards is the plain order, but a
    # checkpoint saved with parts=4 brings its law, for the loader and the digests alike.
    reference = run(tmp_path / "straight", 16, urls=shards, parts=4)
    first = run(tmp_path / "ckpt", 9, urls=shards, parts=4)
    second = run(tmp_path / "ckpt", 16, resume=True, urls=shards, parts=None)
    assert first.seen + second.seen == reference.seen
    assert reference.seen != run(tmp_path / "plain", 16, urls=shards, parts=None).seen


@pytest.mark.distributed
def test_with_rank_local_parts_two_ranks_resumed_on_one_see_the_batches_of_a_straight_run(
    shards: str, two_then_one: Path, tmp_path: Path
) -> None:
    # parts=12 (NOTE [ rank-local parts ]): each of the 2 ranks reads its 6 parts; the
    # resume on 1 rank reads all 12, and the global batches are the straight run's.
    reference = run(tmp_path / "straight", 20, urls=shards, parts=12)
    first = global_batches(str(two_then_one / "parts" / "first"), 2)
    second = global_batches(str(two_then_one / "parts" / "second"), 1)
    assert sorted(first) == list(range(9)) and sorted(second) == list(range(9, 20))
    assert [first.get(b) or second[b] for b in range(20)] == reference.seen
    assert reference.seen != run(tmp_path / "plain", 20, urls=shards).seen  # parts change it


if __name__ == "__main__":
    main()


def test_record_seeding_gives_a_sample_the_same_draws_for_any_batch_size_and_world_size(
    shards: str,
) -> None:
    def draws(seeding: str, batch_size: int, world: int, skip_samples: int) -> list[Any]:
        sources = [
            make(shards, seed=3, batch_size=batch_size, world_size=world, rank=r,
                 map=noisy_label, collate_fn=list, seeding=seeding, skip_samples=skip_samples)
            for r in range(world)
        ]  # fmt: skip
        out: list[Any] = []
        iterators = [iter(source) for source in sources]
        for _ in range(60 // (batch_size * world)):  # record j of rank r: sample j W + r
            shares = [next(iterator) for iterator in iterators]
            out += [shares[r][j] for j in range(batch_size) for r in range(world)]
        return out

    one = draws("record", 5, 1, 0)
    assert draws("record", 3, 2, 0) == one == draws("record", 2, 3, 0)[: len(one)]
    assert draws("record", 4, 1, 7)[:53] == one[7:]  # a resume at sample 7
    assert draws("batch", 3, 2, 0) != draws("batch", 5, 1, 0)  # the control: keys differ
    with pytest.raises(ValueError, match=r"seeding should be one of .*'record'.* but got"):
        make(shards, seeding="sample")


def test_a_schedule_over_shards_with_record_seeding_trains_the_same_augmented_samples(
    shards: str, tmp_path: Path
) -> None:
    """A switch rebuilds the source with another batch size; each sample keeps its draws."""
    plain = run(tmp_path / "plain", 12, urls=shards, seeding="record")  # 96 samples
    ramp = [[0, 4], [10, 12], [50, 8]]  # 4 x 3, then 12 x 4 (at 12), then 8 from 60
    run(tmp_path / "ramp", 5, urls=shards, seeding="record", global_batch_size=ramp)
    resumed = run(tmp_path / "ramp", 10, resume=True, urls=shards, seeding="record",
                  global_batch_size=ramp)  # fmt: skip
    keys = [key for keys in plain.seen for key in keys]
    sizes = [len(keys) for keys in resumed.seen]
    assert sizes == [12, 12, 8, 8, 8]  # batches 5-9: samples 36-84
    assert [key for keys in resumed.seen for key in keys] == keys[36:84]
    assert all(torch.equal(a, b) for a, b in zip(resumed.inputs, plain.inputs[36:84], strict=True))
