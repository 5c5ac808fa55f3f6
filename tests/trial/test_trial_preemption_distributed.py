"""Preemption as real processes: SIGTERM to one rank, torchrun restarts, two nodes -> one.

torchrun launches the demo trial (gloo on 127.0.0.1); two torchrun agents with a c10d
rendezvous on 127.0.0.1 stand in for two nodes. The uninterrupted reference run and the
SIGTERM-then-"auto" run come from the shared ``demo`` fixture (tests/trial/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from trial_helpers import metrics

from detsamplers.trial._demo import free_port, global_batches, launch, torchrun
from tests.helpers import wait_agents

pytestmark = pytest.mark.distributed

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = ["--num-workers=1", "--records=256", "--global-batch-size=16", "--max-batches=48"]


def test_sigterm_to_one_rank_stops_every_rank_after_one_batch_and_auto_resumes_exactly(
    demo: tuple[bool, list[str], Path],
) -> None:
    ok, lines, _ = demo
    table = "\n".join(lines)
    assert ok, table
    for row in (
        "SIGTERM to one rank: every rank exited 0                PASS",
        "SIGTERM to one rank: all stopped after one batch        PASS",
        "SIGTERM + auto resume: no batch twice or skipped        PASS",
        "SIGTERM + auto resume: global batches identical         PASS    48/48",
        "SIGTERM + auto resume: final weights bit-identical      PASS",
    ):
        assert row in table, table


def test_a_torchrun_restart_after_a_worker_dies_resumes_on_its_own_bit_identical(
    demo: tuple[bool, list[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, work = demo
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name, value in (("AT", "13"), ("RANK", "1"), ("FIRST_ATTEMPT", "1")):
        monkeypatch.setenv(f"TRIAL_KILL_{name}", value)
    args = [f"--checkpoint-dir={tmp_path}", *COMMON, "--resume", f"--weights-out={tmp_path}/w.pt"]
    # c10d rendezvous, as for elastic jobs; init() keys the store per attempt, so that the
    # restarted ranks never read the dead attempt's gloo addresses (NOTE [ restart attempts ])
    endpoint = f"--rdzv-endpoint=127.0.0.1:{free_port()}"
    options = ["--rdzv-backend=c10d", endpoint, "--rdzv-id=restarted", "--max-restarts=1"]
    launch(2, args, str(tmp_path / "log"), module="trial_worker", options=options)
    resumes = [row["batches_trained"] for row in metrics(str(tmp_path)) if row["type"] == "resume"]
    assert resumes == [8]  # one launch: torchrun restarted it, from the checkpoint before 13
    straight = torch.load(work / "reference" / "weights.pt", weights_only=True)
    restarted = torch.load(tmp_path / "w.pt", weights_only=True)
    assert all(torch.equal(straight[k], restarted[k]) for k in straight)


def test_two_nodes_paused_by_sigterm_resume_on_one_node_with_the_same_global_batches(
    demo: tuple[bool, list[str], Path], tmp_path: Path
) -> None:
    _, _, work = demo
    ckpt, first, second = tmp_path / "ckpt", tmp_path / "first", tmp_path / "second"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",  # a hang prints every process's stacks (wait_agents)
        "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "TRIAL_SIGNAL_AT": "10",
        "TRIAL_SIGNAL_RANK": "3",  # one rank of the second node
    }
    nodes = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    nodes.append("--rdzv-id=preempted")
    args = [f"--checkpoint-dir={ckpt}", f"--record-dir={first}", *COMMON, "--resume"]
    with open(tmp_path / "log", "a") as log:
        agents = [
            subprocess.Popen(
                torchrun(2, args, "trial_worker", [*nodes, f"--node_rank={node}"]),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            for node in range(2)
        ]
        codes = wait_agents([(agent, tmp_path / "log") for agent in agents], 300)
    assert codes == [0, 0], (tmp_path / "log").read_text()[-3000:]
    stops = [row for row in metrics(str(ckpt)) if row["type"] == "stop"]
    assert len(stops) == 1 and stops[0]["batches_trained"] < 48
    stop = stops[0]["batches_trained"]
    paused = global_batches(str(first), 4)
    assert sorted(paused) == list(range(stop))  # all four ranks stopped after one batch

    args = [f"--checkpoint-dir={ckpt}", f"--record-dir={second}", *COMMON, "--resume"]
    launch(2, args, str(tmp_path / "log"))
    resumed = global_batches(str(second), 2)
    assert min(resumed) == stop
    expected = global_batches(str(work / "reference"), 2)
    assert {**paused, **resumed} == expected
