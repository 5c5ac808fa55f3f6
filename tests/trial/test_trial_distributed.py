"""Several ranks over torch.distributed (torchrun, gloo on 127.0.0.1): pause, resume, refuse."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from demo_trial import DemoTrial, main, mixture
from torch import nn
from trial_helpers import launch_runs, metrics

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.trial import load_trial_from_checkpoint_path
from detsamplers.trial._data import global_batch

pytestmark = pytest.mark.distributed

COMMON = ["--num-workers=1", "--records=256", "--global-batch-size=16", "--max-batches=48"]


def global_stream(records: Path, worlds: list[int]) -> tuple[list[int], list[int]]:
    """The samples of global batches ``0, 1, ...`` trained on ``worlds[b]`` ranks, and sizes."""
    shares: dict[tuple[int, int], list[int]] = {}
    for rank in range(max(worlds)):
        for line in (records / f"records-rank{rank}.jsonl").read_text().splitlines():
            row = json.loads(line)
            shares[row["batch"], row["rank"]] = row["indices"]
    stream: list[int] = []
    sizes = []
    for batch, world in enumerate(worlds):  # record j of rank r is sample j W + r of the batch
        ranks = [shares[batch, r] for r in range(world)]
        stream += [ranks[r][j] for j in range(len(ranks[0])) for r in range(world)]
        sizes.append(len(ranks[0]) * world)
    return stream, sizes


def test_two_ranks_paused_and_resumed_on_one_see_the_global_batches_of_a_straight_run(
    demo: tuple[bool, list[str], Path],
) -> None:
    ok, lines, _ = demo
    assert ok, "\n".join(lines)
    table = "\n".join(lines)
    assert "global batches identical to the uninterrupted run       PASS    48/48" in table
    assert "records seen exactly once per epoch (paused + resumed)  PASS" in table
    assert "resume started at the pause point                       PASS" in table


def test_validation_metrics_are_the_mean_over_every_ranks_records(
    demo: tuple[bool, list[str], Path],
) -> None:
    _, _, work = demo
    reference = str(work / "reference")
    reported = [r for r in metrics(reference) if r["type"] == "validation"][-1]
    assert reported["batches_trained"] == 48
    trial = load_trial_from_checkpoint_path(os.path.join(reference, "batch-000048"), DemoTrial)
    trial.model.eval()
    loader = trial.build_validation_data_loader()
    loader.seed = 1  # the trial seed, as the trainer sets it
    losses = []
    with torch.no_grad():
        for rank in range(2):  # each rank's shard, with the same per-batch seeding
            for x, y, _ in loader.get_data_loader(False, 0, 2, rank):
                losses.append(nn.functional.cross_entropy(trial.model(x), y, reduction="none"))
    expected = torch.cat(losses).mean().item()
    assert len(torch.cat(losses)) == 64
    assert reported["metrics"]["validation_loss"] == pytest.approx(expected, rel=1e-6)


# On 2 ranks, the four runs of FIRSTS share one launch (tests/trial/in_one_launch.py), each in a
# folder of its own; then LATERS resume the four on 1 rank, in this process (a resume on 1 rank
# under torchrun is the demo's third step), and the demo's reference is resumed with another
# seed, which is refused.
FIRSTS = {
    "resized": [
        "--records=80", "--global-batch-size=16", "--max-batches=7", "--checkpoint-every=7",
    ],
    "scheduled": [
        "--records=80", "--global-batch-size=[[0, 16], [40, 24]]", "--max-batches=6",
        "--checkpoint-every=6",
    ],
    "grown": ["--records=80", "--max-batches=3", "--checkpoint-every=3"],
    "mixed": ["--records=80", "--mixture={}", "--max-batches=3", "--checkpoint-every=3"],
}  # fmt: skip
LATERS = {
    "resized": ["--records=80", "--global-batch-size=24", "--max-batches=12", "--resume"],
    "scheduled": [
        "--records=80", "--global-batch-size=[[0, 16], [40, 24], [200, 8]]", "--max-batches=12",
        "--resume",
    ],
    "grown": ["--records=96", "--max-batches=12", "--resume", "--dataset-growth"],
    "mixed": [
        "--records=80", '--mixture={"extra": 16, "plan": [[48, [1, 1, 1]]]}', "--max-batches=12",
        "--resume", "--dataset-growth",
    ],
}  # fmt: skip


@dataclass
class Shared:
    work: Path  # work/NAME: the checkpoints (ckpt/) and records of each run of FIRSTS
    refused: str  # the error of the 1-rank resume of the demo's reference with seed 2


# A rank killed at batch 13 and the run relaunched from its newest checkpoint (batch 8), bit
# identical to the straight run, is tests/trial/test_trial_preemption_distributed.py's torchrun
# restart (the same kill, and the same disk state read by new ranks); that a run failed at
# batch 13 leaves the straight run's state at batch 8 is test_trial_failure_distributed.py's.


@pytest.fixture(scope="module")
def shared(demo: tuple[bool, list[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Shared:
    work = tmp_path_factory.mktemp("shared")

    def common(name: str) -> list[str]:
        return [f"--checkpoint-dir={work / name / 'ckpt'}", f"--record-dir={work / name}"]

    runs: list[dict[str, Any]] = [{"argv": [*common(n), *a]} for n, a in FIRSTS.items()]
    launch_runs(2, runs, work / "on-2")
    for name, argv in LATERS.items():
        main([*common(name), *argv])
    shutil.copytree(demo[2] / "reference", work / "seed" / "ckpt")
    with pytest.raises(
        ReproducibilityError, match="seed is 1 in the checkpoint but 2 here"
    ) as refused:
        main([*common("seed"), *COMMON, "--resume", "--seed=2"])
    return Shared(work, str(refused.value))


def test_a_resume_on_another_world_size_with_another_seed_is_refused(shared: Shared) -> None:
    assert "seed is 1 in the checkpoint but 2 here" in shared.refused


def test_two_ranks_of_8_then_one_rank_of_24_train_every_record_once_per_epoch(
    shared: Shared,
) -> None:
    """A changed global batch (16, then 24) continues at the sample the checkpoint reached."""
    records = shared.work / "resized"
    stream = global_stream(records, [2] * 7 + [1] * 5)[0]
    assert len(stream) == 7 * 16 + 5 * 24
    for epoch in range(len(stream) // 80):
        assert sorted(stream[epoch * 80 : (epoch + 1) * 80]) == list(range(80))
    single = DataLoader(range(80), batch_size=1, shuffle=True, seed=1)  # the trial seed
    assert stream == [global_batch(single, k, 1)[0] for k in range(len(stream))]
    metadata = json.loads((records / "ckpt" / "batch-000012" / "metadata.json").read_text())
    assert (metadata["samples_trained"], metadata["global_batch_size"]) == (232, 24)


def test_a_schedule_switching_mid_run_on_two_ranks_resumed_on_one_trains_every_record_once(
    shared: Shared,
) -> None:
    """2 ranks: 16, then 24 from sample 40 (batch 3, at sample 48); paused after 6 batches
    (120 samples); resumed on 1 rank with the same past and a new switch to 8 at sample 200
    (batch 10, at sample 216). NOTE [ batch size schedule ]."""
    records = shared.work / "scheduled"
    stream, sizes = global_stream(records, [2] * 6 + [1] * 6)
    assert sizes == [16] * 3 + [24] * 7 + [8] * 2
    for epoch in range(len(stream) // 80):
        assert sorted(stream[epoch * 80 : (epoch + 1) * 80]) == list(range(80))
    single = DataLoader(range(80), batch_size=len(stream), shuffle=True, seed=1)
    assert stream == [int(i) for i in next(iter(single.get_data_loader(repeat=True)))]
    metadata = json.loads((records / "ckpt" / "batch-000012" / "metadata.json").read_text())
    assert metadata["batch_segments"] == [[0, 0, 16], [3, 48, 24], [10, 216, 8]]
    assert (metadata["samples_trained"], metadata["epoch_index"]) == (232, 2)


def test_a_dataset_grown_at_a_resume_from_two_ranks_onto_one_trains_each_record_once(
    shared: Shared,
) -> None:
    """80 records on 2 ranks, paused after 48 samples; resumed on 1 rank over 96 records with
    dataset_growth=True: the epoch that grew trains the 32 old records not yet trained and
    the 16 new ones, each once, and the next epoch is 96 long. NOTE [ trial growth ]."""
    records = shared.work / "grown"
    stream = global_stream(records, [2] * 3 + [1] * 9)[0]
    assert len(stream) == 12 * 16
    assert sorted(stream[:48]) == sorted(set(stream[:48])) and max(stream[:48]) < 80
    assert sorted(stream[:96]) == list(range(96))  # the grown epoch: every record once
    assert sorted(stream[96:]) == list(range(96))  # the next epoch is 96 long
    metadata = json.loads((records / "ckpt" / "batch-000012" / "metadata.json").read_text())
    assert metadata["dataset_growth"] == [[0, 80], [48, 96]]
    assert (metadata["samples_trained"], metadata["epoch_index"]) == (192, 2)


def test_a_dataset_added_to_a_mixture_from_two_ranks_onto_one_follows_the_straight_run(
    shared: Shared,
) -> None:
    """A mixture of two datasets of 40 records on 2 ranks, paused after 48 samples; resumed
    on 1 rank with a third dataset of 16 appended, entering at sample 48 (dataset_growth=True):
    the global stream is the straight run of the three-dataset mixture, whose first 48
    samples are the two-dataset run's. NOTE [ trial mixture ], NOTE [ adding a component ]."""
    records = shared.work / "mixed"
    stream = global_stream(records, [2] * 3 + [1] * 9)[0]
    spec = {"extra": 16, "plan": [[48, [1, 1, 1]]]}
    straight = mixture(80, spec, 16, 0).sampler
    past = mixture(80, {}, 16, 0).sampler
    assert stream == straight.records(np.arange(192)).tolist()
    assert stream[:48] == past.records(np.arange(48)).tolist()
    assert set(stream[48:]) & set(range(80, 96))  # the new dataset is trained from sample 48
    metadata = json.loads((records / "ckpt" / "batch-000012" / "metadata.json").read_text())
    assert metadata["dataset_growth"] == [[0, 80], [48, 96]]
    assert metadata["samples_trained"] == 192
