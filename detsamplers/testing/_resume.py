"""``check_resume``: run a user's pipeline straight, pause, resume, and compare every batch.

NOTE [ resume check ]
A check has a run configuration (world size ``W``, ``num_workers``, batch size ``B``) and
resumed configurations. The factory builds rank ``r``'s loader for a configuration, as a
fresh process would.

1. The reference: each rank's loader, iterated straight for ``batches`` batches.
2. The pause pass: each rank's loader again, iterated to the last pause point; at each
   pause ``p`` (global batches trained) its state is saved through the route and made a
   round trip through its encoding (NOTE [ state routes ]). Its batches are compared
   with the reference's, so that two straight runs that differ (another ``num_workers``,
   an order drawn at random) are caught before any resume.
3. For each pause and each resumed configuration ``(W', B')``: rank ``r'`` builds a fresh
   loader, loads the state rank ``r' mod W`` saved, and is iterated until it has covered
   the reference's samples. Under the sample law (docs/contract.md) the resumed global
   batch ``b'`` holds samples ``pG + b'G' + jW' + r'`` (``G = BW``): with the same grid
   each batch is compared whole with the reference's; with another grid each record is
   compared with the reference's record at the same sample.

The first difference raises ``AssertionError`` naming the pause, both configurations,
the route, the batch, rank and field, the element, and the likely causes
(NOTE [ mismatch diagnosis ]).

Before any loader is built the arguments are checked, and the factory's signature is
bound to the keywords it will be called with (``inspect.signature``; a callable without
one is checked by the first call). What the factory raises goes up unchanged, with a
note naming the rank and configuration it was building. Every frame of the kit sets
``__tracebackhide__``, so that pytest's report of a failing check shows the user's test
and the message, not the kit's source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._errors import check_int
from ._arguments import check_signature, configs_of, factory_name, pause_points_of
from ._compare import Difference, first_difference, records_of, unbatch
from ._config import Config
from ._diagnose import likely_causes
from ._route import StateRoute, choose_route

__all__ = ["Config", "ResumeReport", "check_resume"]


@dataclass
class ResumeReport:
    """What a passing check compared.

    Attributes:
        pauses: The pause points (global batches trained before the pause).
        resumed: The resumed configurations.
        route: The state route's name.
        batches: Batches compared (every rank's, every run).
        seconds: Wall time of the check.

    Examples:
        >>> from detsamplers.loader import DataLoader
        >>> report = check_resume(lambda rank, world_size, num_workers: DataLoader(range(9)))
        >>> report.pauses, report.route, report.batches
        ([2], 'loader.state_dict()', 6)
    """

    pauses: list[int]
    resumed: list[Config]
    route: str
    batches: int = 0
    seconds: float = 0.0


def _build(factory: Callable[..., Any], rank: int, config: Config) -> Any:
    __tracebackhide__ = True
    kwargs: dict[str, Any] = {
        "rank": rank,
        "world_size": config.world_size,
        "num_workers": config.num_workers,
    }
    if config.batch_size is not None:
        kwargs["batch_size"] = config.batch_size
    try:
        loader = factory(**kwargs)
    except Exception as error:
        error.add_note(
            f"(raised by the factory {factory_name(factory)} building rank {rank}'s loader for "
            f"{config.describe()}, in detsamplers.testing's resume check)"
        )
        raise
    if loader is None:
        raise TypeError(
            f"factory should return a loader (an iterable of batches), but "
            f"{factory_name(factory)} returned None for rank {rank} ({config.describe()}); "
            "return the loader it builds"
        )
    from ..loader import DataLoader

    if isinstance(loader, DataLoader):  # ours: its training stream on this rank
        if loader.num_workers != config.num_workers:
            raise ValueError(
                f"factory should build a loader with num_workers={config.num_workers}, but "
                f"it built one with num_workers={loader.num_workers}; pass num_workers "
                "through to the DataLoader"
            )
        loader = loader.get_data_loader(repeat=True, num_replicas=config.world_size, rank=rank)
    if not hasattr(loader, "__iter__"):
        raise TypeError(
            f"factory should return a loader (an iterable of batches), but it returned "
            f"{type(loader).__name__} for rank {rank} ({config.describe()}); return a "
            "DataLoader or another loader with state_dict()"
        )
    return loader


def _close(iterator: Any) -> None:
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


class _EndedEarlyError(AssertionError):
    """A loader yielded fewer batches than the check needs."""


def _take(loader: Any, count: int, what: str, rank: int) -> list[Any]:
    __tracebackhide__ = True
    iterator = iter(loader)
    out = []
    try:
        for _ in range(count):
            out.append(next(iterator))
    except StopIteration:
        raise _EndedEarlyError(
            f"the {what} on rank {rank} ended after {len(out)} batches, but the check needs "
            f"{count}: build a training loader (repeat=True), or ask for fewer batches"
        ) from None
    finally:
        _close(iterator)
    return out


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class _Checker:
    def __init__(
        self,
        factory: Callable[..., Any],
        pauses: list[int],
        batches: int,
        run: Config,
        resumed: list[Config],
        route: StateRoute | str,
        equal: Callable[[Any, Any], bool] | None = None,
    ) -> None:
        self.factory = factory
        self.equal = equal
        self.records = 0  # records rank 0's uninterrupted run fetched (probe budget)
        self.pauses = pauses
        self.batches = batches
        self.run = run
        self.resumed = resumed
        self.route_arg = route
        self.route: StateRoute | None = None
        self.compared = 0

    # -- the three phases -------------------------------------------------------------

    def reference(self) -> list[list[Any]]:
        __tracebackhide__ = True
        reference = []  # a loop, not a comprehension: its frame would show in pytest's report
        for r in range(self.run.world_size):
            loader = _build(self.factory, r, self.run)
            reference.append(_take(loader, self.batches, "uninterrupted run", r))
        self.records = sum(records_of(batch) or 1 for batch in reference[0])
        return reference

    def pause_pass(self, reference: list[list[Any]]) -> tuple[Config, list[dict[int, Any]]]:
        __tracebackhide__ = True
        probe = _build(self.factory, 0, self.run)
        self.route = route = choose_route(probe, self.route_arg)
        config = self.run
        if not route.exact_with_workers and config.num_workers > 0:
            config = replace(config, num_workers=0)  # NOTE [ state routes ]
        states: list[dict[int, Any]] = []
        last = max(self.pauses)
        for rank in range(config.world_size):
            loader = _build(self.factory, rank, config)
            iterator = iter(loader)
            saved: dict[int, Any] = {}
            try:
                for step in range(last + 1):
                    if step in self.pauses:
                        saved[step] = route.round_trip(route.save(loader))
                    if step == last:
                        break
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        raise AssertionError(
                            f"the run to pause at batch {last} ended after {step} batches on "
                            f"rank {rank}; pause earlier, or build a training loader"
                        ) from None
                    difference = self._difference(reference[rank][step], batch)
                    if difference is not None:
                        self._fail_straight(config, step, rank, difference)
                    self.compared += 1
            finally:
                _close(iterator)
            states.append(saved)
        return config, states

    def resume(
        self, reference: list[list[Any]], paused: Config, states: list[dict[int, Any]]
    ) -> None:
        __tracebackhide__ = True
        assert self.route is not None
        per_rank = self._per_rank_batch(reference)
        for pause in self.pauses:
            for config in self.resumed:
                same_grid = config.world_size == self.run.world_size and (
                    config.batch_size is None or config.batch_size == per_rank
                )
                if same_grid:
                    self._resume_same_grid(reference, paused, states, pause, config)
                else:
                    self._resume_other_grid(reference, paused, states, pause, config, per_rank)

    # -- resumes ----------------------------------------------------------------------

    def _resumed(
        self,
        paused: Config,
        states: list[dict[int, Any]],
        pause: int,
        config: Config,
        rank: int,
        count: int,
    ) -> list[Any]:
        __tracebackhide__ = True
        assert self.route is not None
        loader = _build(self.factory, rank, config)
        source = rank % paused.world_size
        try:
            self.route.load(loader, states[source][pause])
            # A loader may apply the state when iteration starts (StatefulDataLoader).
            return _take(loader, count, f"run resumed after batch {pause}", rank)
        except _EndedEarlyError:
            raise
        except Exception as error:
            raise AssertionError(
                f"resume check failed: the state saved by rank {source} after {pause} "
                f"batches ({paused.describe()}) does not load into rank {rank} "
                f"({config.describe()}) through {self.route.name}: "
                f"{type(error).__name__}: {error}"
            ) from error

    def _resume_same_grid(
        self,
        reference: list[list[Any]],
        paused: Config,
        states: list[dict[int, Any]],
        pause: int,
        config: Config,
    ) -> None:
        __tracebackhide__ = True
        count = self.batches - pause
        for rank in range(config.world_size):
            got = self._resumed(paused, states, pause, config, rank, count)
            for k, batch in enumerate(got):
                difference = self._difference(reference[rank][pause + k], batch)
                if difference is not None:
                    self._fail_resume(paused, config, pause, pause + k, rank, k, difference)
                self.compared += 1

    def _resume_other_grid(
        self,
        reference: list[list[Any]],
        paused: Config,
        states: list[dict[int, Any]],
        pause: int,
        config: Config,
        per_rank: int,
    ) -> None:
        __tracebackhide__ = True
        world = self.run.world_size
        width = per_rank * world
        start, end = pause * width, self.batches * width
        resumed_b = config.batch_size if config.batch_size is not None else per_rank
        resumed_w = config.world_size
        resumed_width = resumed_b * resumed_w
        count = -(-(end - start) // resumed_width)
        records: dict[int, list[list[Any]]] = {}
        for rank in range(world):
            records[rank] = []
            for batch in reference[rank]:
                records[rank].append(unbatch(batch))
        for rank in range(resumed_w):
            got = self._resumed(paused, states, pause, config, rank, count)
            for k, batch in enumerate(got):
                self.compared += 1
                for j, record in enumerate(unbatch(batch)):
                    sample = start + k * resumed_width + j * resumed_w + rank
                    if sample >= end:
                        break
                    b, offset = divmod(sample, width)
                    jj, r = divmod(offset, world)
                    difference = first_difference(
                        records[r][b][jj], record, f"[{j}]", equal=self.equal
                    )
                    if difference is not None:
                        self._fail_resume(
                            paused,
                            config,
                            pause,
                            None,
                            rank,
                            k,
                            difference,
                            f" (sample {sample}: record {jj} of batch {b} on rank {r} in "
                            "the uninterrupted run)",
                        )

    # -- helpers ----------------------------------------------------------------------

    def _per_rank_batch(self, reference: list[list[Any]]) -> int:
        __tracebackhide__ = True
        if self.run.batch_size is not None:
            return self.run.batch_size
        needs = any(
            c.world_size != self.run.world_size or c.batch_size is not None for c in self.resumed
        )
        if not needs:
            return 0
        size = records_of(reference[0][0])
        if size is None:
            raise TypeError(
                "resumed configurations with another world size or batch size compare "
                "record by record, but the loader's batches have no common first "
                f"dimension ({type(reference[0][0]).__name__}); set Config(batch_size=...) "
                "and return tensors, arrays or dicts/lists of them"
            )
        return size

    def _difference(self, expected: Any, got: Any) -> Difference | None:
        __tracebackhide__ = True
        return first_difference(expected, got, equal=self.equal)

    def _causes(self, configs: Iterable[Config], changed_grid: bool) -> str:
        workers = any(c.num_workers > 0 for c in configs)

        def build() -> Any:
            return _build(self.factory, 0, replace(self.run, num_workers=0))

        causes = likely_causes(
            build, workers=workers, changed_grid=changed_grid, calls=self.records, equal=self.equal
        )
        if not causes:
            return (
                " No likely cause was found by probing the dataset, collate_fn, "
                "worker_init_fn and the order; look for state outside the loader's "
                "(a global, a file read in order, a generator)."
            )
        first, rest = causes[0], causes[1:]
        text = f" Likely cause: {first}."
        for other in rest:
            text += f" Also: {other}."
        return text

    def _fail_straight(self, config: Config, step: int, rank: int, difference: Difference) -> None:
        __tracebackhide__ = True
        other = "" if config == self.run else f" and {config.describe()}"
        raise AssertionError(
            f"resume check failed before any resume: two uninterrupted runs "
            f"({self.run.describe()}{other}) differ in batch {step} on rank {rank} "
            f"{difference.describe()}." + self._causes([config, self.run], changed_grid=False)
        )

    def _fail_resume(
        self,
        paused: Config,
        config: Config,
        pause: int,
        batch: int | None,
        rank: int,
        k: int,
        difference: Difference,
        extra: str = "",
    ) -> None:
        __tracebackhide__ = True
        assert self.route is not None
        changed = config.world_size != paused.world_size or config.batch_size not in (
            None,
            paused.batch_size,
        )
        encoding = "" if self.route.encoding is None else f", {self.route.encoding}"
        which = f"the {_ordinal(k + 1)} batch after the resume on rank {rank}"
        if batch is not None:
            which = f"batch {batch} on rank {rank} (the {_ordinal(k + 1)} after the resume)"
        raise AssertionError(
            f"resume check failed: paused after batch {pause} ({paused.describe()}), "
            f"resumed with {config.describe()} through {self.route.name}{encoding}: {which} "
            f"differs from the uninterrupted run{extra} {difference.describe()}."
            + self._causes([paused, config], changed_grid=changed)
        )


def check_resume(
    factory: Callable[..., Any],
    pauses: Iterable[int] = (2,),
    *,
    batches: int = 6,
    run: Config | None = None,
    resume: Config | Sequence[Config] | None = None,
    route: StateRoute | str = "auto",
    equal: Callable[[Any, Any], bool] | None = None,
) -> ResumeReport:
    """Check that a pipeline resumed at each pause yields the batches of a straight run.

    Args:
        factory: ``factory(rank=, world_size=, num_workers=)`` (and ``batch_size=`` when
            a Config sets one) builds a rank's loader as a fresh process would: a
            ``detsamplers.loader.DataLoader`` (its training stream is used), the loader
            ``get_data_loader`` returns, torchdata's ``StatefulDataLoader``, or any
            loader the ``route`` can save and load.
        pauses: Global batches trained before each pause, in ``[1, batches)``.
        batches: Batches per rank of the uninterrupted run.
        run: The configuration of the uninterrupted and paused runs (default: one rank,
            no workers).
        resume: The configurations to resume with (default: ``run``'s). Another world
            size or batch size is compared record by record at the same sample.
        route: ``"auto"`` or a :class:`StateRoute` (NOTE [ state routes ]).
        equal: ``equal(a, b) -> bool`` compares the batch leaves of your own types
            (anything but tensors, arrays, plain values, dicts, lists, tuples and
            dataclasses); without it they compare by ``==``, and a type without an
            ``__eq__`` is refused (NOTE [ exact comparison ]).

    Returns:
        A :class:`ResumeReport` of what was compared.

    Raises:
        AssertionError: a batch differs (the message names the pause, the batch, rank,
            field and element, and the likely cause), a state does not load, or a loader
            ends early or has no state to save.
        TypeError: an argument has the wrong type, the factory's signature does not
            take ``rank``, ``world_size`` and ``num_workers``, it returns no loader, or a
            batch holds values the check cannot compare.
        ValueError: a pause is out of range.

    Examples:
        >>> from detsamplers.loader import DataLoader
        >>> def factory(rank, world_size, num_workers):
        ...     return DataLoader(range(20), batch_size=2, shuffle=True, seed=7,
        ...                       num_workers=num_workers)
        >>> report = check_resume(factory, pauses=[2, 4], batches=6,
        ...                       resume=[Config(world_size=2)])
        >>> report.batches
        10
    """
    __tracebackhide__ = True
    if not callable(factory):
        raise TypeError(f"factory should be a callable that builds a loader, but got {factory!r}")
    batches = check_int("batches", batches, minimum=2)
    points = pause_points_of(pauses, batches)
    if run is not None and not isinstance(run, Config):
        raise TypeError(f"run should be a Config or None, but got {type(run).__name__} {run!r}")
    run = run if run is not None else Config()
    resumed = configs_of("resume", resume, run)
    if not isinstance(route, (StateRoute, str)):
        raise TypeError(
            f"route should be 'auto' or a StateRoute, but got {type(route).__name__} {route!r}"
        )
    if equal is not None and not callable(equal):
        raise TypeError(
            f"equal should be None or a function equal(a, b) -> bool, but got "
            f"{type(equal).__name__} {equal!r}"
        )
    check_signature(factory, [run, *resumed])
    started = time.perf_counter()
    checker = _Checker(factory, points, batches, run, resumed, route, equal)
    reference = checker.reference()
    paused, states = checker.pause_pass(reference)
    checker.resume(reference, paused, states)
    assert checker.route is not None
    return ResumeReport(
        pauses=points,
        resumed=resumed,
        route=checker.route.name,
        batches=checker.compared,
        seconds=time.perf_counter() - started,
    )
