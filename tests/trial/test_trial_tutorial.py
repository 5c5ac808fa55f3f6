"""Determined's tutorial-shaped trial (tutorial_trial.py), paused and resumed.

Single process under ``init`` and 2 ranks under torchrun (gloo on 127.0.0.1): a resume on
the same world size ends with bit-identical weights, one on another world size trains the
identical global batches. The trial aggregates 2 batches per step and checkpoints every
4, so a pause at batch 7 falls between two steps (its accumulated gradients are saved).

What the AMP part exercises, honestly: a real, enabled ``torch.amp.GradScaler("cpu")``
scaling the loss, unscaling and stepping through ``step_optimizer(scaler=)``, updated by
the trial on the batches that step and checkpointed; the forward pass runs under
``torch.autocast("cpu")`` in bfloat16. Its scale never finds an inf here, so skipped steps
and back-off are covered by test_trial_porting.py instead; float16 and CUDA are not run.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from determined import pytorch as det_pytorch
from trial_helpers import launch_runs
from tutorial_trial import main

from detsamplers import ReproducibilityError

TOTAL, PAUSE = 14, 7
CHIEF_ONLY = {"on_checkpoint_save_start", "on_checkpoint_end", "on_checkpoint_write_end"}


def global_batches(record_dir: Path, ranks: int) -> dict[int, list[float]]:
    """Each global batch's record fingerprints in stream order (the last write wins)."""
    shares: dict[int, dict[int, list[float]]] = defaultdict(dict)
    for rank in range(ranks):
        with open(record_dir / f"batches-rank{rank}.jsonl") as f:
            for line in f:
                row = json.loads(line)
                shares[row["batch"]][rank] = row["records"]
    out = {}
    for batch, by_rank in sorted(shares.items()):
        width = max(len(share) for share in by_rank.values())
        out[batch] = [by_rank[r][j] for j in range(width) for r in range(ranks)]
    return out


def hooks(record_dir: Path, rank: int) -> list[dict[str, Any]]:
    with open(record_dir / f"hooks-rank{rank}.jsonl") as f:
        return [json.loads(line) for line in f]


def weights(trial: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trial.model.state_dict().items()}


def args(work: Path, name: str, batches: int, *extra: str) -> list[str]:
    return [
        f"--checkpoint-dir={work / name}",
        f"--record-dir={work / (name + '-records')}",
        f"--max-batches={batches}",
        f"--weights-out={work / (name + '.pt')}",
        *extra,
    ]


# Single process, under init.


def test_single_process_paused_between_steps_resumes_bit_identical(tmp_path: Path) -> None:
    straight = main(args(tmp_path, "straight", TOTAL))
    main(args(tmp_path, "paused", PAUSE))
    resumed = main(args(tmp_path, "paused", TOTAL))
    assert (tmp_path / "paused" / "batch-000007").is_dir()
    a, b = weights(straight), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["0.weight"], weights(main(args(tmp_path, "short", 2)))["0.weight"])
    assert global_batches(tmp_path / "straight-records", 1) == global_batches(
        tmp_path / "paused-records", 1
    )


# Two ranks, under torchrun.


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks straight to 14; 2 ranks paused at 7, then resumed on 2: the three runs in one
    launch (tests/trial/in_one_launch.py), each resuming only from the disk."""
    work = tmp_path_factory.mktemp("tutorial")
    runs = [
        {"argv": args(work, "straight", TOTAL)},
        {"argv": args(work, "paused", PAUSE), "copy": [[f"{work}/paused", f"{work}/paused-at-7"]]},
        {"argv": args(work, "paused", TOTAL)},
    ]
    launch_runs(2, runs, work, module="tutorial_trial")
    return work


@pytest.mark.distributed
def test_two_ranks_paused_between_steps_and_resumed_on_two_end_bit_identical(
    two_ranks: Path,
) -> None:
    straight = torch.load(two_ranks / "straight.pt", weights_only=True)
    resumed = torch.load(two_ranks / "paused.pt", weights_only=True)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    with open(two_ranks / "paused-at-7" / "batch-000007" / "metadata.json") as f:
        assert json.load(f)["pending_gradients"] is True


@pytest.mark.distributed
def test_one_rank_resumed_from_two_trains_the_identical_global_batches(
    two_ranks: Path, tmp_path: Path
) -> None:
    shutil.copytree(two_ranks / "paused-at-7", tmp_path / "one")
    with pytest.raises(ReproducibilityError, match="between two steps of gradient aggregation"):
        main(args(tmp_path, "one", TOTAL))  # batch 7's accumulated gradients are per rank
    shutil.rmtree(tmp_path / "one" / "batch-000007")
    # The newest before it: batch 6, checkpointed after the epoch's validation (policy "all").
    main(args(tmp_path, "one", TOTAL))
    one = global_batches(tmp_path / "one-records", 1)
    two = global_batches(two_ranks / "straight-records", 2)
    assert sorted(one) == list(range(6, TOTAL))
    assert all(one[b] == two[b] for b in one)
    single = main(args(tmp_path, "single", TOTAL))
    assert global_batches(tmp_path / "single-records", 1) == two
    assert single.context.get_global_batch_size() == 16


@pytest.mark.distributed
def test_every_hook_runs_on_the_ranks_determined_runs_it_on(two_ranks: Path) -> None:
    chief, other = (hooks(two_ranks / "straight-records", r) for r in (0, 1))
    assert {row["hook"] for row in chief} == {*CHIEF_ONLY, *(row["hook"] for row in other)}
    assert not CHIEF_ONLY & {row["hook"] for row in other}
    assert [r for r in chief if r["hook"] not in CHIEF_ONLY] == other  # same hooks, same args
    ends = [row["metrics"] for row in other if row["hook"] == "on_validation_end"]
    assert [m["records_seen"] for m in ends] == [40, 40, 40]  # the wrapped reducer, all ranks
    fired = {row["hook"] for row in hooks(two_ranks / "paused-records", 0)}
    assert fired == {name for name in vars(det_pytorch.PyTorchCallback) if name.startswith("on_")}
    resumed = hooks(two_ranks / "paused-records", 1)
    second = resumed[[row["hook"] for row in resumed].index("on_trial_shutdown") + 1 :]
    assert second[0] == {"hook": "on_trial_startup", "first_batch_idx": PAUSE}
    assert second[1]["hook"] == "on_checkpoint_load_start"
    assert second[2] == {"hook": "on_training_start", "workloads": 3}  # restored state
