"""A rank that fails exits (NOTE [ failing rank exits ]): one process, then real torchrun runs.

A rank whose ``train_batch`` raises, with loader workers, and a node lost from two torchrun
agents (c10d rendezvous on 127.0.0.1): every surviving process must exit non-zero within
seconds, so that torchrun sees the failure, and the newest checkpoint, which an ``"auto"``
relaunch resumes from, holds the straight run's state. Every subprocess has a timeout: a
hang fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud
from trial_helpers import same_state

from detsamplers.trial import find_latest_checkpoint
from detsamplers.trial._demo import descendants, end_run, free_port, processes, torchrun
from detsamplers.trial._shield import failure_flag, shield_workers
from tests.helpers import wait_agents

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = ["--num-workers=1", "--records=256", "--global-batch-size=16"]
EXIT_SECONDS = 60  # from the failure to torchrun's exit; a few seconds unloaded


def _env(**extra: str) -> dict[str, str]:
    path = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")
    # PYTHONFAULTHANDLER: a hang prints every process's stacks (end_run, wait_agents).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", "PYTHONPATH": path}
    return {**env, **extra}


def _pids(record_dir: Path, ranks: range) -> list[int]:
    return [int((record_dir / f"pid-rank{rank}").read_text()) for rank in ranks]


def _gone(groups: list[int], seconds: float) -> bool:
    """Whether every live process of these process groups is gone (zombies count as gone).

    torchrun starts each rank in a session of its own, which its loader workers share.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        table = processes()
        if not any(state != "Z" and group in groups for state, _, group in table.values()):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.workers
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_shielded_worker_lives_through_a_stop_signal_until_its_fit_fails(method: str) -> None:
    flag = failure_flag()
    loader = tud.DataLoader(range(64), num_workers=1, multiprocessing_context=method, timeout=60)
    iterator = iter(shield_workers(loader, (signal.SIGTERM, signal.SIGUSR1), flag))
    next(iterator)
    worker = iterator._workers[0]  # type: ignore[attr-defined]
    try:
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(2)
        assert worker.is_alive()  # a pause: the worker lives on
        assert next(iterator) is not None
        flag.value = True  # fit failed
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(30)
        assert not worker.is_alive() and worker.exitcode == 0
    finally:
        iterator._shutdown_workers()  # type: ignore[attr-defined]


@pytest.mark.subprocess
def test_one_process_whose_train_batch_raises_with_a_worker_exits_non_zero(tmp_path: Path) -> None:
    # The repro: num_workers=1, train_batch raises at batch 2; it used to hang.
    args = [f"--checkpoint-dir={tmp_path}", "--max-batches=10", "--num-workers=1"]
    env = _env(TRIAL_RAISE_AT="2", TRIAL_RAISE_RANK="0")
    script = os.path.join(HERE, "trial_worker.py")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, script, *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "RuntimeError: train_batch of rank 0 failed at batch 2" in done.stderr
    raised = float((tmp_path / "raised-rank0").read_text())
    assert time.time() - raised < EXIT_SECONDS, f"{time.monotonic() - started:.1f} s in all"


@pytest.mark.distributed
def test_a_rank_whose_train_batch_raises_with_workers_exits_leaving_the_straight_state_to_resume(
    demo: tuple[bool, list[str], Path], tmp_path: Path
) -> None:
    _, _, work = demo
    ckpt, first = tmp_path / "ckpt", tmp_path / "first"
    args = [f"--checkpoint-dir={ckpt}", *COMMON, "--max-batches=48", "--resume"]
    env = _env(TRIAL_RAISE_AT="13", TRIAL_RAISE_RANK="1")
    with open(tmp_path / "log", "a") as log:
        agent = subprocess.Popen(
            torchrun(2, [*args, f"--record-dir={first}"], "trial_worker"),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        [code] = wait_agents([(agent, tmp_path / "log")], 180)  # a hang fails, with stacks
    exited = time.time()
    text = (tmp_path / "log").read_text()
    assert code != 0, text[-3000:]
    assert "train_batch of rank 1 failed at batch 13" in text
    raised = float((first / "raised-rank1").read_text())
    assert exited - raised < EXIT_SECONDS, f"{exited - raised:.1f} s from the raise to the exit"
    assert _gone(_pids(first, range(2)), 30), "a rank or a loader worker outlived the run"

    # What "auto" resumes from is the newest checkpoint, written before batch 13 and the same
    # state as the straight run's there; that a new launch of the same command from such a
    # checkpoint ends bit identical to the straight run is the torchrun restart's check
    # (tests/trial/test_trial_preemption_distributed.py), so no relaunch here.
    newest = find_latest_checkpoint(str(ckpt))
    assert newest is not None and os.path.basename(newest) == "batch-000008"
    assert sorted(os.listdir(ckpt)) == ["batch-000008", "metrics.jsonl"]  # nothing half written
    straight = work / "reference" / "batch-000008"
    for name in ("state-dict.pth", "rank-0.pth", "rank-1.pth"):
        ours = torch.load(os.path.join(newest, name), weights_only=False)
        assert same_state(ours, torch.load(straight / name, weights_only=False)), name
    saved = json.loads((Path(newest) / "metadata.json").read_text())
    reference = json.loads((straight / "metadata.json").read_text())
    for metadata in (saved, reference):
        del metadata["hparams"]["record_dir"]  # the only difference: each run's own folder
    assert saved == reference


@pytest.mark.distributed
def test_a_lost_node_makes_the_other_torchrun_agent_exit_non_zero(tmp_path: Path) -> None:
    # Node 0 hosts the rendezvous store; node 1 (agent, rank, loader worker) is lost whole.
    records = tmp_path / "records"
    args = [f"--checkpoint-dir={tmp_path / 'ckpt'}", f"--record-dir={records}", *COMMON]
    args += ["--max-batches=100000000", "--checkpoint-every=100000000"]
    endpoint = f"--rdzv-endpoint=127.0.0.1:{free_port()}"
    nodes = ["--nnodes=2", "--rdzv-backend=c10d", endpoint, "--rdzv-id=lost", "--max-restarts=0"]
    with open(tmp_path / "log", "a") as log:
        agents = [
            subprocess.Popen(
                torchrun(
                    1,
                    args,
                    "trial_worker",
                    [*nodes, f"--node_rank={node}", f"--rdzv-conf=is_host={int(node == 0)}"],
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                start_new_session=True,
            )
            for node in range(2)
        ]
        try:
            trained = records / "records-rank0.jsonl"
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and agents[0].poll() is None:
                if trained.exists() and trained.read_text().count("\n") >= 10:
                    break
                time.sleep(0.1)
            assert trained.exists(), (tmp_path / "log").read_text()[-3000:]
            survivors = descendants(agents[0].pid)  # its rank and the rank's loader worker
            end_run(agents[1])  # SIGKILL to node 1's agent, its rank and the rank's worker
            killed = time.monotonic()
            [code] = wait_agents([(agents[0], tmp_path / "log")], 180)  # a hang fails, stacks
            seconds = time.monotonic() - killed
        finally:
            for agent in agents:
                if agent.poll() is None:
                    end_run(agent)
    text = (tmp_path / "log").read_text()
    assert code != 0, text[-3000:]
    assert seconds < EXIT_SECONDS * 2, f"{seconds:.1f} s from the loss to the exit"
    assert survivors and _gone(survivors, 30), "the surviving rank or its worker outlived it"


@pytest.fixture(scope="module")
def held_lock_stops() -> dict[str, list[str]]:
    """Each start method's verdict and seconds from one process that runs both in turn
    (tests/trial/shield_held_lock.py), each with a loader and a worker of its own."""
    script = os.path.join(HERE, "shield_held_lock.py")
    done = subprocess.run(
        [sys.executable, script, "fork", "spawn"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


@pytest.mark.subprocess
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_worker_stopped_inside_torchs_event_check_does_not_hang_the_stop_of_its_loader(
    method: str, held_lock_stops: dict[str, list[str]]
) -> None:
    # The worker exits while it holds the semaphore that done_event.set() in the parent takes.
    verdict, seconds = held_lock_stops[method]
    assert verdict == "stopped", f"the loader's stop waited {seconds} s on the dead worker's lock"
