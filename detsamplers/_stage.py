"""The template every stage follows: iteration, cursor, epochs and state.

A subclass validates its arguments, calls ``Stage.__init__`` and fills in the hooks listed
in ``Stage``'s docstring: ``config`` and ``__len__`` always (they are abstract), ``_map``
(its pure index map, NOTE [ position algebra ]) and, for chains that cannot be addressed,
``fallback_pass``/``fallback_stream``. This class owns the rest:

- ``__iter__`` returns a generator whose body runs lazily, so creating an iterator has no
  side effect (torchdata's StatefulDataLoader creates several and uses the last);
- a finite stage starts the next pass of its segment's clock; an infinite one continues
  from the position the latest iterator reached (a skip or a loaded state sets it);
- positions are turned into items a numpy block at a time, the first blocks small so the
  first batch after a seek is quick;
- the position is read from the block's list iterator (``length_hint``), so counting
  costs nothing per item.

NOTE [ state hooks ]
A state is a position plus the chain's configuration (NOTE [ position algebra ]). Some
links let their configuration change after the saved position without touching the
records already read: a mixture's later curriculum segments and appended samplers
(NOTE [ mixture law ], NOTE [ adding a component ]), a growth recorded at or after the
saved position (NOTE [ growth law ]). The template knows none of them: every link of a
chain (``Node``) has two hooks, ``adopt_state(top, state)``, which returns the saved
state rewritten in this chain's terms where the link allows the difference (and the
state unchanged otherwise, so that the check names the difference), and
``state_additions(top, position)``, informational keys the link adds to a saved state (a
mixture's progress). ``state_dict`` and ``load_state_dict`` call them on each link from
the source outwards; a stage with a load of its own (a skip's sample grid,
NOTE [ sample positions ]) overrides ``load_state_dict`` and calls ``adopt_saved`` first.

NOTE [ readable chains ]
A stage reads its chain by position when every link can be addressed (``indexable``), and
by iterating its inner link otherwise, each link iterating the one below. A link that is
read only by position (``by_position_only``: a mixture) therefore cannot sit under a link
that cannot be addressed (a ``BatchSampler`` over batches) once a stage wraps the two: the
stage would reach it by iterating. ``Stage.__init__`` refuses such a chain when it is built,
naming the stage, the sampler it wraps and the fix, instead of failing at the first item.
"""

from __future__ import annotations

import operator
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._errors import check_int
from ._order import check_wrap
from ._source import Clock, Node, as_node, chain_of
from ._state import STATE_VERSION, check_state, fingerprint

__all__ = ["Stage"]

I64 = npt.NDArray[np.int64]
T = TypeVar("T")

#: Records in the first block of an iteration, and the most in any block. Blocks double
#: from the first to the last size: small first blocks keep the time to the first batch
#: low, large later ones amortise numpy's per-call overhead. The cap keeps each int64
#: temporary at 128 KiB, which glibc's malloc serves from its heap; at 32768 records the
#: temporaries were mapped afresh per block and page-faulted (table a of
#: benchmarks/samplers_table.py went from 21.4-24.4 to 25.5-28.4 M indices/s per rank).
FIRST_BLOCK_RECORDS = 256
MAX_BLOCK_RECORDS = 16384


class _Cursor:
    """Where the latest iterator is: ``base + count - (items left in the current block)``."""

    __slots__ = ("base", "count", "items")

    def __init__(self, position: int) -> None:
        self.base = position
        self.count = 0
        self.items: Iterator[Any] | None = None

    def position(self) -> int:
        if self.items is None:
            return self.base + self.count
        return self.base + self.count - operator.length_hint(self.items)


def _check_readable(owner: str, inner: Any, node: Node, inner_param: str) -> None:
    """Refuse a chain that ``owner`` could only iterate down to a by-position link.

    NOTE [ readable chains ].
    """
    if node.indexable:
        return
    for link in chain_of(node):  # the fallback iterates every link down to the source
        if link.by_position_only:
            raise ValueError(
                f"{owner} cannot wrap this {inner_param} ({type(inner).__name__}): it holds "
                f"a {type(link).__name__}, which is read only by position, under a link that "
                f"cannot be addressed (a BatchSampler over batches), so {owner} could only "
                f"iterate it; batch the {type(link).__name__}'s records once, e.g. "
                "SkipBatchSampler(BatchSampler(DistributedSampler(mixture, world_size, "
                "rank), batch_size, drop_last), skip)"
            )


class Stage(Node, tud.Sampler[T], metaclass=ABCMeta):
    """Base of every stage: a torch ``Sampler`` that is a pure map over stream positions.

    The template calls the hooks below; a stage overrides only what is its own (the table
    in docs/architecture.md says the same, with who overrides each).

    Abstract (every concrete stage defines them):

    - ``config()``: this link's part of the chain's fingerprint (a JSON-able dict).
    - ``__len__()``: what ``len()`` reports (Determined's length for the same verb).

    Class attributes: ``verb`` (its place in NOTE [ chain order ]; ``"source"`` until a
    stage sets it), ``_state_extra`` (the keys it adds to ``state_dict``; none),
    ``by_position_only`` (NOTE [ readable chains ]; False), and ``kind``, ``indexable`` and
    ``infinite`` (records or batches, addressable, endless: the inner node's, set by
    ``__init__``; a mixture, which has no inner node, sets its own).

    Positions (each defaults to the inner node's):

    - ``_map(positions)``: this stage's positions to its inner node's (the identity).
    - ``pass_length``: items in one pass (a stage that changes it: shuffle, shard, skip); a
      stage made endless by a repeat has none and raises ``TypeError`` naming itself.
    - ``_period()``: positions per pass (``pass_length``).
    - ``_pass_range(epoch)``: the positions of pass ``epoch`` (``[e P, (e + 1) P)``).
    - ``_epoch_of(position)``: the pass a position lies in (``position // P``).
    - ``_initial_position()``: where a new stage starts (0).
    - ``records(positions)``/``batches(positions)``: the items at positions (the inner
      node's at ``_map(positions)``); ``records_per_item`` and ``inner_node()``.

    Iteration:

    - ``_on_start()``: checks when an iteration starts (none).
    - ``_claim()``: where a new iteration starts and stops, and its pass.
    - ``_emit_batches(positions)``: the block of batches iteration yields (``batches``).
    - ``fallback_pass(epoch)``/``fallback_stream()``: iterate a pass, or the endless
      stream, over a chain that cannot be addressed (none: ``Node`` raises).
    - ``_generate_fallback(cursor, start, epoch)``: how that iteration is cut at ``start``.
    - ``__iter__()``/``set_epoch(epoch)``: a lazy generator; the next pass.

    State (NOTE [ state hooks ]):

    - ``_state_position()``: the position ``state_dict`` saves (the cursor's).
    - ``state_dict()``/``load_state_dict(state)``: a stage with keys of its own extends
      them and calls ``adopt_saved`` first.
    - ``adopt_state(top, state)``/``state_additions(top, position)``: a link's allowed
      changes at a resume and its informational keys (the state unchanged; none).

    Raises:
        TypeError: the sampler it wraps is not iterable, or is a one-pass iterator.
        ValueError: the chain order is wrong (NOTE [ chain order ]), or the chain could
            be read only by iterating a link read by position (NOTE [ readable chains ]).

    Examples:
        >>> from detsamplers import RepeatSampler
        >>> sorted(Stage.__abstractmethods__)
        ['__len__', 'config']
        >>> RepeatSampler(range(3)).verb
        'repeat'
    """

    #: Keys a subclass adds to ``state_dict()`` (``load_state_dict`` refuses any other).
    _state_extra: tuple[str, ...] = ()
    #: The links whose ``state_additions`` add keys, from the source outwards (found once:
    #: a chain is fixed once built, and a loader asks for the state at every batch).
    _adding: list[Node] | None = None

    def __init__(self, inner: Any, inner_param: str) -> None:
        if not isinstance(inner, Node):
            if not hasattr(inner, "__iter__"):
                raise TypeError(
                    f"{inner_param} should be a sampler (an iterable of indices), but got "
                    f"{inner_param}={inner!r} of type {type(inner).__name__}"
                )
            if iter(inner) is inner:
                raise TypeError(
                    f"{inner_param} should be a sampler that can be iterated again, but got an "
                    f"iterator ({type(inner).__name__}), which is used up after one pass; pass "
                    "the sequence or sampler it came from"
                )
        node = as_node(inner)
        check_wrap(type(self).__name__, self.verb, node, f"this {inner_param}")
        _check_readable(type(self).__name__, inner, node, inner_param)
        self._inner_obj = inner
        self._inner = node
        self.kind = node.kind
        self.indexable = node.indexable
        self.infinite = self.verb == "repeat" or node.infinite
        self._resume: int | None = None
        if not self.infinite:
            self.clock = node.clock if node.clock is not None else Clock()
        self._cursor = _Cursor(self._initial_position())
        self._config: tuple[list[dict[str, Any]], str] | None = None

    # -- what every stage fills in (abstract) -------------------------------------------

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """This link's part of the chain's fingerprint (JSON-able)."""

    @abstractmethod
    def __len__(self) -> int:
        """What ``len()`` reports: Determined's length for this verb."""

    # -- what a stage may fill in ------------------------------------------------------

    def _map(self, positions: I64) -> I64:
        """Map this stage's positions to its inner node's positions."""
        return positions

    def _initial_position(self) -> int:
        return 0

    def _on_start(self) -> None:
        """Checks run when an iteration starts (before the first item)."""

    # -- the node protocol -------------------------------------------------------------

    @property
    def pass_length(self) -> int:
        """Items in one pass: the inner node's (a stage that changes it overrides this).

        Raises:
            TypeError: the stage is endless, so it has no pass.

        Examples:
            >>> from detsamplers import RepeatSampler
            >>> RepeatSampler(range(3)).pass_length
            Traceback (most recent call last):
            ...
            TypeError: RepeatSampler has no pass_length: it is endless (it repeats its sampler ...
        """
        if self.infinite and (error := self._no_pass()) is not None:
            raise error
        return self._inner.pass_length

    def _no_pass(self) -> TypeError | None:
        """The error ``pass_length`` raises when a repeat in the chain makes it endless.

        None when no repeat is in the chain (a mixture is endless but has a pass of its
        components, NOTE [ mixture law ]).
        """
        repeat = next((k for k in chain_of(self) if k.verb == "repeat"), None)
        if repeat is None:
            return None
        name, its = type(self).__name__, type(repeat).__name__
        why = "it repeats its sampler" if repeat is self else f"the {its} in its chain repeats"
        return TypeError(
            f"{name} has no pass_length: it is endless ({why} pass after pass, forever), so "
            f"a pass of it never ends; ask the finite sampler the {its} wraps for its "
            "pass_length, or use len() for Determined's length"
        )

    def inner_node(self) -> Node:
        return self._inner

    @property
    def records_per_item(self) -> int:
        return self._inner.records_per_item

    def records(self, positions: I64) -> I64:
        return self._inner.records(self._map(positions))

    def batches(self, positions: I64) -> list[list[int]]:
        return self._inner.batches(self._map(positions))

    # -- passes ------------------------------------------------------------------------

    def _period(self) -> int:
        """Positions per pass: pass ``e`` lies in ``[e * period, (e + 1) * period)``."""
        return self.pass_length

    def _pass_range(self, epoch: int) -> tuple[int, int]:
        period = self._period()
        return epoch * period, (epoch + 1) * period

    def _epoch_of(self, position: int) -> int:
        period = self._period()
        return position // period if period else 0

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration yield pass ``epoch`` of this finite chain.

        Every ``iter()`` already starts the next pass, so this is only for code that
        drives epochs itself (for example after loading a model checkpoint by hand). On an
        infinite stream (a repeat inside) the call is checked and changes nothing: its pass
        ``e`` starts at position ``e * N``, so no batch depends on an epoch number, and the
        frameworks that call it on every pass (Accelerate on every ``iter()``) neither
        break nor steer it (NOTE [ framework hooks ]).

        Raises:
            ValueError: a repeat wraps this finite stage: its pass number is
                ``position // N``, set through ``skip`` or ``load_state_dict`` instead.
        """
        epoch = check_int("epoch", epoch, minimum=0)
        if self.clock is None:
            return  # an infinite stream's passes are its positions'
        if self.clock.frozen_by is not None:
            raise ValueError(
                f"set_epoch cannot be used on {type(self).__name__} because a "
                f"{self.clock.frozen_by} wraps it and numbers passes by position // N; "
                "pass skip= to the outermost stage or use its load_state_dict instead"
            )
        self.clock.next_pass = epoch
        self._resume = None

    # -- iteration ---------------------------------------------------------------------

    def __iter__(self) -> Iterator[T]:
        return self._generate()

    def _claim(self) -> tuple[int, int | None, int]:
        """Decide where the new iteration starts and stops; only called once it runs."""
        start, epoch = self._next_start()
        if self.infinite:
            return start, None, 0
        assert self.clock is not None
        self._resume = None
        self.clock.next_pass = epoch + 1
        return start, self._pass_range(epoch)[1], epoch

    def _next_start(self) -> tuple[int, int]:
        """Where the next iteration will start, and its pass (0 if infinite); no effect."""
        if self.infinite:
            return self._cursor.position(), 0
        assert self.clock is not None
        if self._resume is not None:
            epoch = self._epoch_of(self._resume)
            return max(self._resume, self._pass_range(epoch)[0]), epoch
        epoch = self.clock.next_pass
        return self._pass_range(epoch)[0], epoch

    def _generate(self) -> Iterator[Any]:
        # Every link's checks, not only this one's: an outer stage reads an inner repeat's
        # positions without iterating it, and an empty pass under it must still be refused.
        for link in reversed(chain_of(self)):
            if isinstance(link, Stage):
                link._on_start()
        start, stop, epoch = self._claim()
        cursor = _Cursor(start)
        self._cursor = cursor
        if self.indexable:
            yield from self._generate_indexed(cursor, start, stop)
        else:
            yield from self._generate_fallback(cursor, start, epoch)

    def _generate_indexed(self, cursor: _Cursor, start: int, stop: int | None) -> Iterator[Any]:
        per_item = max(1, self.records_per_item)
        size = max(1, FIRST_BLOCK_RECORDS // per_item)
        largest = max(1, MAX_BLOCK_RECORDS // per_item)
        emit = self._emit_records if self.kind == "record" else self._emit_batches
        position = start
        while stop is None or position < stop:
            n = size if stop is None else min(size, stop - position)
            items = iter(emit(np.arange(position, position + n, dtype=np.int64)))
            cursor.base, cursor.count, cursor.items = position, n, items
            yield from items
            position += n
            size = min(size * 2, largest)

    def _emit_records(self, positions: I64) -> list[int]:
        out: list[int] = self.records(positions).tolist()
        return out

    def _emit_batches(self, positions: I64) -> list[Any]:
        """The block of batches iteration yields (an outer stage may tag them)."""
        return self.batches(positions)

    def _generate_fallback(self, cursor: _Cursor, start: int, epoch: int) -> Iterator[Any]:
        if self.infinite:
            source, offset = self.fallback_stream(), start
        else:
            source, offset = self.fallback_pass(epoch), start - epoch * self._period()
        for item in islice(source, offset, None):
            cursor.count += 1
            yield item

    # -- state -------------------------------------------------------------------------

    def chain_config(self) -> list[dict[str, Any]]:
        """Each link's configuration, from the source outwards (JSON-able, a fresh copy)."""
        return [dict(link) for link in self._configured()[0]]

    def _configured(self) -> tuple[list[dict[str, Any]], str]:
        # The configuration is fixed once the chain is built; hash it once, since
        # StatefulDataLoader asks for the state at every batch it dispatches.
        if self._config is None:
            chain = [link.config() for link in reversed(chain_of(self))]
            self._config = (chain, fingerprint(chain))
        return self._config

    def state_dict(self) -> dict[str, Any]:
        """The position reached by the latest iterator and the chain's fingerprint.

        A new dict each call, small and JSON-able: torchdata's ``StatefulDataLoader``
        can store it as it is.
        """
        _, digest = self._configured()
        position = self._state_position()
        state: dict[str, Any] = {
            "version": STATE_VERSION,
            "position": position,
            "fingerprint": digest,
            "chain": self.chain_config(),
        }
        if self._adding is None:
            links = reversed(chain_of(self))
            self._adding = [x for x in links if type(x).state_additions is not Node.state_additions]
        for link in self._adding:  # informational, not checked on load
            state.update(link.state_additions(self, position))
        return state

    def _state_position(self) -> int:
        """The position ``state_dict`` saves: the latest iterator's (a loader may know better)."""
        return self._cursor.position()

    def adopt_saved(self, state: Any) -> Any:
        """``state`` with every link's allowed changes adopted (NOTE [ state hooks ]).

        Each link, from the source outwards, may rewrite a saved state whose chain differs
        from this one only in what that link lets change after the saved position; any
        other difference is left for the state check to name.
        """
        for link in reversed(chain_of(self)):
            state = link.adopt_state(self, state)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a state saved by ``state_dict`` of an identical chain.

        The next iteration starts at the saved position, in O(1) over an indexable chain.

        Raises:
            ReproducibilityError: the state comes from a chain with another configuration
                (seed, dataset length, stages, rank...); the message names each difference.
                A link may allow some changes from the saved position on (a mixture's later
                curriculum segments, a recorded growth: NOTE [ state hooks ]).
        """
        state_dict = self.adopt_saved(state_dict)
        position = check_state(
            state_dict, self.chain_config(), type(self).__name__, self._state_extra
        )
        self._cursor = _Cursor(position)
        if not self.infinite:
            assert self.clock is not None
            self._resume = position
            self.clock.next_pass = self._epoch_of(position)
