"""The parts law of a shard source: chosen when it is built, and again when a state loads.

NOTE [ parts chosen at load ]
``parts=None`` (the default) is the plain order (``C = 0``) for every shard list, local or
remote: one rule whatever the storage, so the same files give the same stream on disk,
over HTTP(S) and in an object store, and a dataset moved to a bucket keeps its order.
(For a while remote shards chose ``C`` up to 720 from their sizes: the same files then gave
another order once remote. A state saved then brings that law back when loaded, below.)
Parts are a choice made once for a run, by ``parts=C``, because they change the order: a
rank of ``W`` dividing ``C`` then reads only its parts' shards (NOTE [ rank-local parts ]),
which over remote shards and several nodes is what keeps each node's downloads near its
share; docs/webdataset-locality.md ("Choosing ``parts``") says how to pick ``C``.

The node cache depends on the storage, never the order: remote shards (every URL remote)
with ``parts`` or an explicit ``cache_dir`` are downloaded whole into it, by default in
``$XDG_CACHE_HOME/detsamplers/shards`` bounded by ``DEFAULT_CACHE_LIMIT`` (64 GiB) unless
``cache_limit`` says otherwise (an explicit ``cache_dir`` has no limit unless given one);
the log says so once per process and folder (``announce_cache``). ``cache_dir=False``
turns it off: remote shards are then read by byte ranges, in the same order. Local shards
are read in place.

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

import logging
from collections.abc import Mapping
from typing import Any

from ..._state import fingerprint
from .order._shard_order import ShardOrder
from .read._node_cache import ShardCache, default_cache_dir
from .remote._urls import is_remote

__all__ = ["DEFAULT_CACHE_LIMIT", "adopt_parts", "announce_cache", "set_parts"]

#: The bytes the default cache folder may hold when no ``cache_limit`` is given (64 GiB).
DEFAULT_CACHE_LIMIT = 64 << 30
_log = logging.getLogger("detsamplers.loader")
#: The default cache folders this process has announced (``announce_cache``).
_announced: set[str] = set()
#: The largest ``C`` a state may bring to ``parts=None`` (a hostile state's huge prime
#: would cost its factoring); a larger one must be passed as ``parts``.
ADOPT_LIMIT = 1 << 20


def set_parts(source: Any, parts: int, part_shards: str) -> None:
    """Build a ``WebDatasetSource``'s order, cache, config and fingerprint for ``parts``.

    ``source`` is typed ``Any``: this module is below ``_webdataset_source`` (no import circle).
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
    # Local shards need no cache (a list mixing both is read without one); cache_dir=False
    # reads remote ones by ranges. Neither changes the order (NOTE [ parts chosen at load ]).
    folder = source.cache_dir
    remote = all(is_remote(s.url) for s in source.shards)
    if remote and folder is not False and (folder is not None or source.parts):
        limit = source.cache_limit
        if folder is None:  # the default folder: bounded unless the user says otherwise
            folder, limit = default_cache_dir(), DEFAULT_CACHE_LIMIT if limit is None else limit
            announce_cache(folder, limit)
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


def announce_cache(folder: str, limit: int | None) -> None:
    """Log, once per process and folder, that remote shards go to the default node cache.

    NOTE [ parts chosen at load ]: a source with ``parts`` over remote shards downloads
    them whole into ``folder`` unless told otherwise. This says where, how much and how to
    change it, at ``WARNING`` on the ``detsamplers.loader`` logger, so that it shows with
    no logging set up; passing ``cache_dir`` (a folder, or ``False``) says it was meant.
    """
    if folder in _announced:
        return
    _announced.add(folder)
    bound = "no limit" if limit is None else f"at most {limit / (1 << 30):.3g} GiB"
    _log.warning(
        "detsamplers: remote shards are downloaded whole, once per node, into the node cache "
        "%s (%s; the least recently used unpinned shards are deleted first). Pass "
        "cache_dir='/a/folder' to choose the folder, cache_limit=<bytes> to bound it, or "
        "cache_dir=False to read the shards by byte ranges without a cache (the order is "
        "the same).",
        folder,
        bound,
    )


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
