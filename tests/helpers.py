"""Shared test helpers: a foreign sampler, ``take``, and waiting for torchrun agents."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch.utils.data as tud

from detsamplers.trial._demo import end_run


class ForeignSampler(tud.Sampler[int]):
    """A sampler detsamplers cannot address: it only iterates (forces the fallback path)."""

    def __init__(self, values: Sequence[int]) -> None:
        self.values = list(values)

    def __iter__(self) -> Iterator[int]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def take(iterable: Any, n: int) -> list[Any]:
    return list(islice(iter(iterable), n))


def wait_agents(agents: list[tuple[subprocess.Popen[Any], Path]], seconds: float) -> list[int]:
    """Wait for torchrun agents a test started, each with its log; a hang ends them all.

    Within ``seconds`` in all; otherwise, or if the wait is interrupted, every agent still
    running is ended by ``end_run``, every process under it printing its stacks into its
    agent's log (which the agent must write in append mode, as ``end_run`` appends to it
    too, and with ``PYTHONFAULTHANDLER=1`` in its environment). A hang fails the test with
    those stacks; an interruption is raised again, with them in a note.
    """
    deadline = time.monotonic() + seconds
    try:
        return [agent.wait(timeout=max(0.0, deadline - time.monotonic())) for agent, _ in agents]
    except BaseException as error:
        stacks = ""
        for agent, log in agents:
            if agent.poll() is None:
                stacks += end_run(agent, stacks_log=str(log))
        if isinstance(error, subprocess.TimeoutExpired):
            message = f"torchrun ran past {seconds:g} s; its stacks:\n{stacks}"
            raise AssertionError(message) from None
        if hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"the torchrun agents were stopped; their stacks:\n{stacks}")
        raise


def run_agent(
    command: list[str], log: Path, env: dict[str, str], timeout: float, cwd: Path | None = None
) -> int:
    """Run one torchrun command, its output appended to ``log``; its exit status.

    A hang or an interruption ends it with every process's stacks (:func:`wait_agents`).
    """
    env = {**env, "PYTHONFAULTHANDLER": "1"}
    with open(log, "a") as out:
        agent = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        [code] = wait_agents([(agent, log)], timeout)
    return code
