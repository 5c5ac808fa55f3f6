"""Checking by running whether a resume reproduces the exact remaining stream."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from harness.ranks import on_ranks

#: What a check reports: True, False, or why it could not run ("no (raises ...)" counts as no).
Outcome = bool | str

#: The capability runs: samples, global batch, steps, and the step whose state is resumed.
CAP_N, CAP_BATCH, CAP_STEPS, CAP_AT = 160, 16, 25, 13


def take(batches: Iterable[Sequence[int]], count: int) -> list[list[int]]:
    """The first ``count`` batches as lists of ints."""
    return [[int(i) for i in batch] for batch in itertools.islice(batches, count)]


def merge_ranks(per_rank: Sequence[Sequence[Sequence[int]]]) -> list[list[int]]:
    """Global steps from each rank's batches: step t holds every rank's batch t, sorted.

    One rank's batches come back as they are (in their order).

    Examples:
        >>> merge_ranks([[[4, 0], [2]], [[1], [3, 5]]])
        [[0, 1, 4], [2, 3, 5]]
        >>> merge_ranks([[[4, 0], [2]]])
        [[4, 0], [2]]
    """
    if len(per_rank) == 1:
        return [list(batch) for batch in per_rank[0]]
    steps = min(len(batches) for batches in per_rank)
    return [sorted(i for batches in per_rank for i in batches[t]) for t in range(steps)]


def same_stream(
    reference: Sequence[Sequence[int]], resumed: Sequence[Sequence[int]], *, ordered: bool = True
) -> bool:
    """Whether ``resumed`` holds the same batches as ``reference``, in the same order.

    With ``ordered=False`` the order within a batch is ignored (global batches gathered
    from several ranks).

    Examples:
        >>> same_stream([[1, 2], [3]], [[1, 2], [3]])
        True
        >>> same_stream([[1, 2], [3]], [[2, 1], [3]])
        False
        >>> same_stream([[1, 2], [3]], [[2, 1], [3]], ordered=False)
        True
    """
    if len(reference) != len(resumed):
        return False
    if ordered:
        return [list(b) for b in reference] == [list(b) for b in resumed]
    return [sorted(b) for b in reference] == [sorted(b) for b in resumed]


def outcome(check: Callable[[], bool]) -> Outcome:
    """Run ``check``; an exception is a "no" that names it.

    Examples:
        >>> outcome(lambda: True), outcome(lambda: 1 / 0 > 0)
        (True, 'no (raises ZeroDivisionError)')
    """
    try:
        return bool(check())
    except Exception as exc:  # the peer refused the resume: that is the answer
        return f"no (raises {type(exc).__name__})"


def show(result: Outcome) -> str:
    """ "yes", "no" or the reason."""
    if result is True:
        return "yes"
    if result is False:
        return "no"
    return result


def world_change(
    module: str, kwargs: dict[str, Any], worlds: tuple[int, int], steps: int, at: int, batch: int
) -> Outcome:
    """Save on ``worlds[0]`` ranks after ``at`` global steps, resume on ``worlds[1]`` ranks.

    ``module.rank_run(world, rank, batch, steps, save_at, state, **kwargs)`` runs on each
    rank of a torchrun (``harness.ranks``): ``batch`` is the rank's share of the global
    batch; it returns ``{"batches": [...], "state": ...}``, the state saved after
    ``save_at`` steps (rank 0's is the one resumed from, as a checkpoint holds one). Yes
    when the global steps after the resume equal those of the uninterrupted run on
    ``worlds[0]`` ranks; a rank that raises gives "no (raises X)" and prints the message.
    """
    first, then = worlds

    def launch(world: int, **more: Any) -> list[Any] | str:
        try:
            runs = on_ranks(world, module, "rank_run", {**kwargs, **more, "batch": batch // world})
        except RuntimeError as exc:
            print(f"{module}, {first} -> {then} ranks: {exc}", flush=True)
            return "no (hangs or dies)" if "no end" in str(exc) else "no (a rank died)"
        for run in runs:
            if "error" in run:
                print(f"{module}, {first} -> {then} ranks: {run['error']}", flush=True)
                return f"no (raises {run['error'].split(':')[0]})"
        return runs

    ahead = launch(first, steps=steps, save_at=at, state=None)
    if isinstance(ahead, str):
        return ahead
    reference = merge_ranks([run["batches"] for run in ahead])[at:]
    resumed = launch(then, steps=steps - at, save_at=None, state=ahead[0]["state"])
    if isinstance(resumed, str):
        return resumed
    return same_stream(reference, merge_ranks([run["batches"] for run in resumed]), ordered=False)


def loader_rank_run(
    fresh: Any,
    labels: Callable[[Any], list[int]],
    state: dict[str, Any] | None,
    steps: int,
    save_at: int | None,
) -> dict[str, Any]:
    """The body of a stateful loader's ``rank_run`` (see ``world_change``).

    ``steps`` batches of ``fresh`` (``state`` loaded first if given), epoch after epoch, as
    their labels, and the loader's ``state_dict()`` after ``save_at`` of them.
    """
    if state is not None:
        fresh.load_state_dict(state)
    batches: list[list[int]] = []
    saved = None
    for batch in endless(fresh, labels):
        batches.append(batch)
        if len(batches) == save_at:
            saved = fresh.state_dict()
        if len(batches) == steps:
            break
    return {"batches": batches, "state": saved}


def state_after(loader: Any, position: int, count: Callable[[Any], int]) -> tuple[Any, int]:
    """A stateful loader's ``state_dict()`` after its first batch ending at or past
    ``position`` samples (an epoch per ``iter()``), and the samples seen by then;
    ``count`` gives a batch's number of samples."""
    seen = 0
    while seen < position:
        for out in loader:
            seen += count(out)
            if seen >= position:
                break
    return loader.state_dict(), seen


def endless(loader: Any, labels: Callable[[Any], list[int]]) -> Iterator[list[int]]:
    """The labels of ``loader``'s batches, an epoch per ``iter()``, as a training loop drives it."""
    while True:
        for out in loader:
            yield labels(out)


def loader_capability(
    module: str,
    write: Callable[[str, int, int], str],
    loader: Callable[[str, int, int], Any],
    labels: Callable[[Any], list[int]],
    quick: bool,
) -> dict[str, Outcome]:
    """Q5 for a stateful shard loader: its state after ``CAP_AT`` steps into a fresh loader.

    ``write(parent, total, per_shard)`` writes ``CAP_N`` samples and returns the folder;
    ``loader(folder, workers, batch)`` builds the peer's loader over it; ``labels`` reads a
    batch's labels. The world-size checks run ``module.rank_run`` on torchrun ranks
    (``world_change``) and are skipped under ``quick``.
    """
    with tempfile.TemporaryDirectory() as parent:
        folder = write(parent, CAP_N, CAP_N // 4)
        reference = take(endless(loader(folder, 0, CAP_BATCH), labels), CAP_STEPS)[CAP_AT:]
        ahead = loader(folder, 0, CAP_BATCH)
        take(endless(ahead, labels), CAP_AT)
        state = ahead.state_dict()

        def rest(workers: int) -> list[list[int]]:
            fresh = loader(folder, workers, CAP_BATCH)
            fresh.load_state_dict(state)
            return take(endless(fresh, labels), CAP_STEPS - CAP_AT)

        result: dict[str, Outcome] = {
            "same config": outcome(lambda: same_stream(reference, rest(0))),
            "other num_workers": outcome(lambda: same_stream(reference, rest(2))),
        }
        if quick:
            skip = "not checked (--quick: torchrun)"
            return {**result, "other world size": skip, "world size 2 to 1": skip}
        steps = (CAP_STEPS, CAP_AT, CAP_BATCH)
        return {
            **result,
            "other world size": world_change(module, {"folder": folder}, (1, 2), *steps),
            "world size 2 to 1": world_change(module, {"folder": folder}, (2, 1), *steps),
        }
