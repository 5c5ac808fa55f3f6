"""The parts law of a shard source: chosen when it is built, and again when a state loads.

NOTE [ parts chosen at load ]
``parts=None`` (the default) lets the source choose ``C``: 0 (the plain order) for local
shards, so every local order is the one of earlier releases, and for remote shards the
largest of ``AUTO_PARTS`` (720, 360, 240, 120, 60, 24, 12, 6, 2; each divides 720) with
``2 C`` shards of the mean size within the byte budget (``cache_limit``, else
``AUTO_BUDGET`` = 64 GiB) and ``16 C <= N`` (the ``N mod C`` samples past the parts,
which every rank reads in turn, stay under 1/16 of an epoch). A rank of ``W`` pins at most
``2 C / W`` of its parts' shards in the node cache at once (NOTE [ shard cache ]), so one
rank (the worst case) pins at most the budget: 720 for shards up to 47 MB, 24 for 1 GB
shards. Over remote shards the default also turns on the node cache, in the default
folder (``$XDG_CACHE_HOME/detsamplers/shards``) and, unless ``cache_limit`` says otherwise,
bounded by the same budget (an explicit ``cache_dir`` has no limit unless given one). The choice
depends on the shards (their sizes and number) and ``cache_limit``, never on the world
size, so every rank of every world size chooses the same ``C``.

A source is built before its state is loaded, so ``load_state_dict`` may change the law:

- ``parts=None``: the source takes the state's ``C`` (``parts`` absent: 0, the plain
  order, as every state saved before ``parts`` existed) and rebuilds what follows from it
  (the order, the fingerprint and config, the reader's open shards, the node cache: none
  without ``cache_dir`` when the state's ``C`` is 0, as that run read); a later
  ``state_dict`` saves the state's law, so the run keeps it for good.
- ``parts=C`` given: the state must have the same ``C`` (else the load is refused, naming
  both).
- Either way, a state with ``parts`` but without ``part_shards`` was saved under the law
  before NOTE [ fixed part cover ] (each epoch's parts cut from that epoch's shard order,
  offset ``o`` dealt to part ``o mod C``): the source resumes it in that order
  (``part_shards="epoch"``).
- A state's ``parts`` above ``ADOPT_LIMIT`` (``2**20``) or not a count is not taken (a
  hostile file's huge prime would cost its factoring): the check refuses it, naming it.

The trial loop rebuilds each rank's source from the user's with ``for_rank``, and checks a
digest computed from the user's source, so it applies the checkpoint's law to the user's
source too (``ShardData.load``, NOTE [ trial data ]).

A state refused by the check that follows leaves the source with the law it had.

The new law joins the config (``"part_shards": "run"``) and so the fingerprint; the check of
the state that follows is the usual one (NOTE [ counts summary ]): any other difference is
refused. A ``WebDatasetMix`` takes ``parts`` explicitly (default 0, NOTE [ mixture lanes ])
and resumes a state of the earlier law with its own ``parts`` in that law's order, as
an explicit ``parts`` does here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._state import fingerprint
from ._cache import ShardCache, default_cache_dir
from ._order import ShardOrder
from ._shard_info import ShardInfo
from ._urls import is_remote

__all__ = ["AUTO_BUDGET", "AUTO_PARTS", "adopt_parts", "auto_parts", "set_parts"]

#: The part counts ``parts=None`` chooses among for remote shards, largest first.
AUTO_PARTS = (720, 360, 240, 120, 60, 24, 12, 6, 2)
#: Bytes ``2 C`` mean shards may take when no ``cache_limit`` is given (64 GiB).
AUTO_BUDGET = 64 << 30
#: The largest ``C`` a state may bring to ``parts=None`` (a hostile state's huge prime
#: would cost its factoring); a larger one must be passed as ``parts``.
ADOPT_LIMIT = 1 << 20


def auto_parts(shards: Sequence[ShardInfo], cache_limit: int | None) -> int:
    """The ``C`` that ``parts=None`` chooses (NOTE [ parts chosen at load ]).

    Examples:
        >>> from detsamplers.loader._wds._shard_info import ShardInfo
        >>> def remote(n, size):
        ...     keys = [str(k) for k in range(100)]
        ...     return [ShardInfo(f"https://h/{i}.tar", "", keys, [], size) for i in range(n)]
        >>> auto_parts(remote(4096, 40 << 20), None), auto_parts(remote(64, 1 << 30), None)
        (720, 24)
        >>> auto_parts(remote(64, 1 << 30), 8 << 30), auto_parts(remote(2, 10), None)
        (2, 12)
    """
    if not shards or not all(is_remote(s.url) for s in shards):
        return 0
    samples = sum(len(s) for s in shards)
    mean = max(1, sum(max(s.size, 0) for s in shards) // len(shards))
    budget = AUTO_BUDGET if cache_limit is None else cache_limit
    return next((c for c in AUTO_PARTS if 2 * c * mean <= budget and 16 * c <= samples), 0)


def set_parts(source: Any, parts: int, part_shards: str) -> None:
    """Build a ``WebDatasetSource``'s order, cache, config and fingerprint for ``parts``.

    ``source`` is typed ``Any``: this module is below ``_source`` (no import circle).
    """
    source.parts = parts if parts > 1 else 0
    source.part_shards = part_shards
    source._order = ShardOrder(
        source._counts,
        source.seed,
        source.shuffle_shards,
        source.shuffle_window,
        source.shuffle_block_shards,
        source.parts,
        part_shards,
    )
    source.cache = None
    # Local shards need no cache (a list mixing both is read without one).
    folder = source.cache_dir
    if all(is_remote(s.url) for s in source.shards) and (folder is not None or source.parts):
        limit = source.cache_limit
        if folder is None:  # the default folder: bounded unless the user says otherwise
            folder, limit = default_cache_dir(), AUTO_BUDGET if limit is None else limit
        source.cache = ShardCache(folder, limit, source.remote)
    config: dict[str, Any] = {
        "seed": source.seed,
        "shuffle_shards": source.shuffle_shards,
        "shuffle_window": source.shuffle_window,
        "repeat": source.repeat,
    }
    if source.shuffle_block_shards:  # absent when off: states saved before it still load
        config["shuffle_block_shards"] = source.shuffle_block_shards
    if source.parts:  # likewise
        config["parts"] = source.parts
        if part_shards == "run":  # NOTE [ fixed part cover ]; absent: the earlier law
            config["part_shards"] = "run"
    source._config = config
    names = [s.path.rsplit("/", 1)[-1] for s in source.shards]
    source._fingerprint = fingerprint([{"source": "webdataset", "shards": names, **config}])


def saved_law(state_dict: Any) -> tuple[int, str] | None:
    """The ``(parts, part_shards)`` a state was saved with, or ``None`` if it names none."""
    config = state_dict.get("config") if isinstance(state_dict, Mapping) else None
    if not isinstance(config, Mapping):
        return None
    parts = config.get("parts", 0)
    valid = isinstance(parts, int) and not isinstance(parts, bool)
    if not valid or not 0 <= parts <= ADOPT_LIMIT:
        return None  # the state's check that follows names it
    law = config.get("part_shards", "epoch" if parts > 1 else "run")
    return parts, law if law in ("run", "epoch") else "run"


def adopt_parts(source: Any, state_dict: Any) -> None:
    """Switch ``source`` to the parts law of ``state_dict`` where allowed.

    NOTE [ parts chosen at load ].

    An explicit ``parts`` keeps its ``C``; only the state's check then refuses another one.
    """
    saved = saved_law(state_dict)
    if saved is None or not source.adopts_parts:  # a mixture checks its own law
        return
    parts, law = saved[0] if saved[0] > 1 else 0, saved[1]
    if not source.parts_auto and parts != source.parts:
        return
    if (parts, law) != (source.parts, source.part_shards):
        set_parts(source, parts, law)
