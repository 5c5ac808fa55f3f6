"""``WebDatasetMix``: several webdataset shard sets mixed with weights, exactly resumable.

NOTE [ shard set mixture ]
A mixture is a :class:`WebDatasetSource` over the concatenation of its shard sets (set 0's
shards, then set 1's...) whose order is not the source's: global position ``p`` maps to a
set ``k`` and a position of set ``k``'s own shard stream by the mixture law (NOTE [ shard
stream mixture ], :mod:`._mixture_order`) or, with ``parts``, by one law per lane (NOTE
[ mixture lanes ], :mod:`._mixture_lanes`). Everything else is the single source's: the split
across ranks and workers, the batch grid, per-batch seeding, the node cache and the
loader, except that ``decode`` and ``map`` may differ per set (NOTE [ per-set arguments
], :mod:`._per_set_args`), each set is read by its own reader (NOTE [ mixture readers ],
:mod:`._set_readers`), and the state has an entry per set (NOTE [ mixture state ],
:mod:`._mixture_state`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any, Literal

import numpy as np
from torch.utils.data import default_collate

from ...._errors import check_int
from ...._mix import MixSampler
from ...._seeds import derive
from ...._state import fingerprint
from ..._seeding import seed_globals
from .._decode import make_decoder
from .._webdataset_source import WebDatasetSource
from ..order._shard_order import ShardOrder
from ..read._cache_reader import CachedReader
from ..read._sample_reader import SampleReader
from ..remote._urls import expand_urls
from ._mixture_fetches import mixture_fetches
from ._mixture_lanes import LaneOrder
from ._mixture_order import MixOrder
from ._mixture_state import (
    MIX_STATE_VERSION,
    check_mix_state,
    shard_name,
    stable,
    summarize_sets,
)
from ._per_set_args import check_named, per_set_decode, per_set_map
from ._set_readers import MixReader

__all__ = ["WebDatasetMix"]

#: One shard set's decoder and map, either of them None.
Stage = tuple[Callable[[dict[str, Any]], Any] | None, Callable[[Any], Any] | None]
#: Shards a set's reader keeps open at most (as the single source's).
_OPEN_SHARDS = 64


class WebDatasetMix(WebDatasetSource):
    """Several webdataset shard sets mixed with weights, as one stream of batches.

    Position ``p`` of the stream is sample ``q`` of shard set ``k``, where ``(k, q)`` is
    :class:`~detsamplers.MixSampler`'s law (NOTE [ mixture law ]): in every window of ``P``
    positions set ``k`` gets its share to within one sample, the interleaving is keyed by
    ``(seed, window)``, and each set advances through its own stream in order, with its own
    epochs (NOTE [ shard stream mixture ]). Set ``k``'s stream is exactly what
    ``WebDatasetSource(urls[k], seed=mix.seeds[k], shuffle_shards=..., shuffle_window=...,
    shuffle_block_shards=...)`` yields. The split across ranks and workers, batching,
    per-batch seeding and :class:`WebDataLoader` are those of :class:`WebDatasetSource`, and
    so is decoding, with a ``decode`` and a ``map`` per set if wanted; the stream is endless
    (``repeat=True``).

    Set ``k``'s shuffles are keyed by its own seed ``mix.seeds[k]``, never by ``seed``
    itself, so a set's stream depends only on ``(seed, k)`` and its shards, not on the
    other sets or how many there are, and one shard set listed twice gets two unrelated
    orders. A one-set mixture with seed ``s`` therefore reads what
    ``WebDatasetSource(urls[0], seed=derive(s, "mix-component", 0), ...)`` reads, not what
    the source with seed ``s`` reads (the tests compare both).

    Args:
        urls: One shard set per component: each a path, fsspec URL or brace pattern, or a
            sequence of these (as ``WebDatasetSource``'s ``urls``).
        weights: One non-negative weight per shard set mixed from position 0, with a
            positive sum. Sets named by no weight here enter with the curriculum segment
            that first names them.
        seed: Keys the interleaving, each set's shard and window shuffles (set ``k``'s seed
            is ``derive(seed, "mix-component", k)``) and the per-batch RNG seeding.
        batch_size: Samples per batch on each rank.
        world_size: Number of ranks.
        rank: This rank, in ``[0, world_size)``.
        window: Positions per window of the mixture (``MixSampler``'s ``window``).
        curriculum: Later segments ``(start, weights)``: from position ``start`` on,
            ``weights`` apply (``MixSampler``'s ``curriculum``). No set loses or repeats a
            sample at a switch. A segment names at least as many sets as the one before
            it and the last names all: a set added at a resume has its urls appended last
            and enters with a segment naming one more weight, from the saved position on
            (NOTE [ adding a component ]); it starts at its own sample 0.
        decode: As for :class:`WebDatasetSource` (every set alike), or a list with one
            entry per shard set (``None``: that set's samples are not decoded). A list of
            as many image specs or handlers as there are sets (two or more) could mean
            either and is refused: pass a tuple for one decoder with these handlers for
            every set, or wrap each set's entry in a tuple.
        map: As for :class:`WebDatasetSource` (every set alike), or a list with one
            function per shard set (``None``: no map for that set). A sample is decoded
            and mapped by its own set's entries, after the RNGs are seeded as
            ``seeding`` says, as for one ``decode`` and ``map``.
        collate_fn: As for :class:`WebDatasetSource` (every set alike).
        shuffle_shards: As for :class:`WebDatasetSource` (every set alike).
        shuffle_window: As for :class:`WebDatasetSource` (every set alike).
        shuffle_block_shards: As for :class:`WebDatasetSource`, inside each set's own
            order: blocks of this many consecutive shards of set ``k``'s epoch order, the
            permutation keyed by ``mix.seeds[k]``, the block and set ``k``'s epoch (NOTE
            [ shard block shuffle ]). Each DataLoader worker keeps up to twice this many
            shards open per set.
        skip: As for :class:`WebDatasetSource` (every set alike).
        skip_samples: As for :class:`WebDatasetSource` (every set alike).
        index_dir: As for :class:`WebDatasetSource` (every set alike).
        storage_options: As for :class:`WebDatasetSource` (every set alike).
        timeout: As for :class:`WebDatasetSource` (every set alike).
        retries: As for :class:`WebDatasetSource` (every set alike).
        read_ahead: As for :class:`WebDatasetSource` (every set alike).
        seeding: As for :class:`WebDatasetSource` (every set alike).
        parts: As for :class:`WebDatasetSource`: one ``C`` for every set, or a list with
            one per set (0: that set in the plain order). The stream is then dealt to
            ``lcm`` of them lanes, ``p mod C``, each a mixture of its own (NOTE [ mixture
            lanes ]), so that a rank of a world size dividing a set's ``C`` reads only its
            parts of that set's shards, the same ones every epoch of the set (NOTE
            [ fixed part cover ]); any other world size stays exact. The parts are in the
            fingerprint. The default stays 0 (the single source's ``None`` is not taken:
            the lanes are one law for every set, NOTE [ parts chosen at load ]).
        cache_dir: As for :class:`WebDatasetSource` (every set alike; with ``parts`` over
            remote shards and no ``cache_dir``, the default cache folder; ``False``: none).
        cache_limit: As for :class:`WebDatasetSource`.
        prefetch: As for :class:`WebDatasetSource`.

    Raises:
        TypeError: an argument has the wrong type (``urls`` a single string, an entry of
            a per-set ``decode`` or ``map`` list).
        ValueError: no shard sets, a set without samples, weights or a per-set ``decode``
            or ``map`` list of the wrong length, an ambiguous ``decode`` list, or any
            error of ``WebDatasetSource`` or ``MixSampler``.

    Determinism:
        A batch's samples depend only on the arguments and the batch's position: not on
        ``num_workers`` or where the run resumed; the global batches are the same on any
        world size with the same global batch.

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> folder = tempfile.mkdtemp()
        >>> for name, count in (("a", 6), ("b", 2)):
        ...     with wds.ShardWriter(os.path.join(folder, name + "-%d.tar"), verbose=0) as w:
        ...         for i in range(count):
        ...             w.write({"__key__": f"{name}{i}", "cls": b"0"})
        >>> mix = WebDatasetMix([os.path.join(folder, "a-0.tar"), os.path.join(folder, "b-0.tar")],
        ...     [0.75, 0.25], seed=0, batch_size=4, collate_fn=list)
        >>> [[s["__key__"] for s in batch] for _, batch in zip(range(2), mix)]
        [['a0', 'a1', 'b0', 'a2'], ['b1', 'a3', 'a4', 'a5']]
        >>> mix.progress()
        {'position': 8, 'consumed': [6, 2], 'epochs': [1, 1]}
    """

    adopts_parts = False  # the mixture's own law checks parts (NOTE [ mixture lanes ])

    def __init__(
        self,
        urls: Sequence[str | os.PathLike[str] | Sequence[str | os.PathLike[str]]],
        weights: Sequence[float],
        *,
        seed: int,
        batch_size: int,
        world_size: int = 1,
        rank: int = 0,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
        decode: Any = None,
        map: Callable[[Any], Any] | list[Callable[[Any], Any] | None] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = default_collate,
        shuffle_shards: bool = True,
        shuffle_window: int = 0,
        shuffle_block_shards: int = 0,
        skip: int = 0,
        skip_samples: int = 0,
        index_dir: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        read_ahead: int = 4 << 20,
        seeding: str = "batch",
        parts: int | Sequence[int] = 0,
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        cache_limit: int | None = None,
        prefetch: int = 8,
    ) -> None:
        if isinstance(urls, str) or not isinstance(urls, Sequence):
            raise TypeError(
                "urls should be a list of shard sets, one per component (each a path, URL or "
                f"brace pattern, or a list of them), but got urls of type {type(urls).__name__}"
            )
        if not urls:
            raise ValueError("urls should hold at least one shard set, but got urls=[]")
        if isinstance(weights, (str, bytes)) or not isinstance(weights, (Sequence, np.ndarray)):
            raise TypeError(
                f"weights should be a sequence of {len(urls)} non-negative numbers, one per "
                f"shard set, but got weights={weights!r} of type {type(weights).__name__}"
            )
        check_named(weights, curriculum, len(urls))
        seed = check_int("seed", seed)
        per_set_parts = _check_parts(parts, len(urls))
        lanes = (
            math.lcm(*[c for c in per_set_parts if c > 1])
            if any(c > 1 for c in per_set_parts)
            else 0
        )
        # The weights, window, curriculum, decode and map are checked before any shard is
        # indexed.
        MixSampler([range(1)] * len(urls), weights, seed, window=window, curriculum=curriculum)
        decoders, maps = per_set_decode(decode, len(urls)), per_set_map(map, len(urls))
        stages: list[Stage] | None = None
        if decoders is not None or maps is not None:
            one = make_decoder(decode) if decoders is None else None
            stages = list(
                zip(
                    decoders or [one] * len(urls),
                    maps or [map] * len(urls),
                    strict=True,
                )
            )
            decode = map = None  # the source decodes nothing itself: _transform does
        sets: list[list[str]] = []
        for k, part in enumerate(urls):
            try:
                sets.append(expand_urls(part))
            except (TypeError, ValueError) as error:
                raise type(error)(f"urls[{k}]: {error}") from None
        super().__init__(
            [url for part in sets for url in part],
            seed=seed,
            batch_size=batch_size,
            world_size=world_size,
            rank=rank,
            decode=decode,
            map=map,  # type: ignore[arg-type]
            collate_fn=collate_fn,
            shuffle_shards=shuffle_shards,
            shuffle_window=shuffle_window,
            shuffle_block_shards=shuffle_block_shards,
            repeat=True,
            skip=skip,
            skip_samples=skip_samples,
            index_dir=index_dir,
            storage_options=storage_options,
            timeout=timeout,
            retries=retries,
            read_ahead=read_ahead,
            seeding=seeding,
            parts=lanes,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            prefetch=prefetch,
        )
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).tolist()
        groups = [self.shards[a:b] for a, b in pairwise(offsets)]
        counts = [[len(s) for s in part] for part in groups]
        for k, part_counts in enumerate(counts):
            if sum(part_counts) == 0:
                raise ValueError(
                    f"urls[{k}] should name shards with samples, but all {len(part_counts)} "
                    "of them are empty; remove the shard set or fill it"
                )
        self.seeds = [derive(seed, "mix-component", k) for k in range(len(sets))]
        self.mixture = MixSampler(
            [range(sum(c)) for c in counts], weights, seed, window=window, curriculum=curriculum
        )
        orders = [
            ShardOrder(c, s, shuffle_shards, shuffle_window, self.shuffle_block_shards, p)
            for c, s, p in zip(counts, self.seeds, per_set_parts, strict=True)
        ]
        self.set_parts = per_set_parts
        self._lanes: LaneOrder | None = None
        if lanes:
            plan = [(0, weights), *[(int(a), w) for a, w in curriculum]]
            self._lanes = LaneOrder(plan, window, seed, lanes, orders)
            self._order = self._lanes  # type: ignore[assignment]
            self._lane_law = (plan, window, seed, lanes, counts, shuffle_shards, shuffle_window)
        else:
            self._order = MixOrder(self.mixture, orders)  # type: ignore[assignment]
        self._offsets = offsets[:-1]
        self._stages = stages
        #: The shard set of each shard (shards numbered across the sets).
        self._owner = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
        law = self.mixture.config()
        self._config = {
            "seed": seed,
            "weights": law["weights"],
            "window": law["window"],
            "curriculum": law["curriculum"],
            "shuffle_shards": shuffle_shards,
            "shuffle_window": shuffle_window,
            # Per set, a hash of its shard file names in order (a state stays small).
            "shards": [fingerprint([{"shards": [shard_name(s) for s in part]}]) for part in groups],
        }
        if self.shuffle_block_shards:  # absent when off: states saved before it still load
            self._config["shuffle_block_shards"] = self.shuffle_block_shards
        if lanes:  # likewise; one value when every set has it
            same = len(set(per_set_parts)) == 1
            self._config["parts"] = per_set_parts[0] if same else list(per_set_parts)
            self._config["part_shards"] = "run"  # NOTE [ fixed part cover ]
        self._fingerprint = stable(self._config)
        self._mix_counts = counts
        self._mix_paths = [[s.path for s in part] for part in groups]
        self._mix_summaries: list[dict[str, Any]] | None = None

    def _reader(self) -> SampleReader:
        """One reader per shard set (NOTE [ mixture readers ]), or the node cache's."""
        if self.cache is not None:
            fetches = None
            if self._lanes is not None:  # NOTE [ mixture fetches ]
                ranks = [self.rank]
                lanes = self._lanes
                fetches = mixture_fetches(
                    lanes.orders, lanes.offsets.tolist(), self.world_size, ranks, self._origin
                )
            return CachedReader(self.shards, self.cache, self.prefetch, fetches)
        block = max(1, self.shuffle_block_shards)
        capacities = [
            min(2 * max(1, c // self.world_size) * block, _OPEN_SHARDS) if c > 1 or block > 1 else 0
            for c in self.set_parts
        ]
        return MixReader(self.shards, self.remote, self._offsets, capacities)

    def _transform(self, items: list[dict[str, Any]], shards: Any, batch: int) -> list[Any]:
        """Each sample decoded and mapped by its own shard set's ``decode`` and ``map``.

        The RNGs are seeded as the single source seeds them (NOTE [ per-batch seeding ]):
        once per batch (when any set decodes or maps), or before each sample that its set
        decodes or maps with ``seeding="record"``; one ``decode`` and ``map`` for every set
        is the single source's own path.
        """
        stages = self._stages
        if stages is None:
            return super()._transform(items, shards, batch)
        if all(d is None and f is None for d, f in stages):
            return items
        owners = self._owner[shards].tolist()
        keys = self._record_keys(batch) if self.seeding == "record" else None
        if keys is None:
            seed_globals(self._batch_key(batch))
        out: list[Any] = []
        for i, (item, k) in enumerate(zip(items, owners, strict=True)):
            decoder, fn = stages[k]
            value: Any = item
            if decoder is None and fn is None:
                out.append(value)
                continue
            if keys is not None:
                seed_globals(keys[i])
            if decoder is not None:
                value = decoder(value)
            out.append(value if fn is None else fn(value))
        return out

    def __len__(self) -> int:
        raise TypeError(
            "len() of a WebDatasetMix is undefined: a mixture streams forever; count steps "
            "in the training loop"
        )

    def progress(self, position: int | None = None) -> dict[str, Any]:
        """Samples each shard set has given before ``position`` (default: the current one).

        ``epochs[k]`` is the passes shard set ``k`` has completed (``MixSampler.progress``;
        with ``parts``, ``consumed[k] // N_k``: the lanes finish a pass at about the same
        position, NOTE [ mixture lanes ]).

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     w.write({"__key__": "k", "cls": b"0"})
            >>> path = os.path.join(folder, "s-0.tar")
            >>> WebDatasetMix([path, path], [1, 1], seed=0, batch_size=1).progress(4)
            {'position': 4, 'consumed': [2, 2], 'epochs': [2, 2]}
        """
        at = self.position if position is None else check_int("position", position, minimum=0)
        if self._lanes is None:
            return self.mixture.progress(at)
        consumed = self._lanes.progress(at)
        sizes = self.mixture.lengths
        epochs = [c // n if n else 0 for c, n in zip(consumed, sizes, strict=True)]
        return {"position": at, "consumed": consumed, "epochs": epochs}

    def state_dict(self) -> dict[str, Any]:
        """The resume state: the global position, what it is checked against, and progress.

        ``counts`` holds each shard set's counts summary, a fixed size whatever its
        number of shards (NOTE [ mixture state ]); ``mixture`` shows each set's samples
        consumed and epochs completed (informational: loading ignores it).
        """
        return {
            "version": MIX_STATE_VERSION,
            "position": self.position,
            "fingerprint": self._fingerprint,
            "config": {**self._config, "shards": list(self._config["shards"])},
            "counts": [dict(s) for s in self._set_summaries()],
            "mixture": self.progress(),
        }

    def _set_summaries(self) -> list[dict[str, Any]]:
        """Each set's counts summary, computed once."""
        if self._mix_summaries is None:
            self._mix_summaries = summarize_sets(self._mix_counts)
        return self._mix_summaries

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume at the state's position, on any world size, batch size or ``num_workers``.

        The curriculum may add or change segments that start at or after the saved
        position (as for ``MixSampler``), and shard sets appended to the saved ones may
        enter with such a segment (NOTE [ adding a component ]): the positions before it
        read what the saved run read, every saved set continues where it was and the new
        one starts at its own sample 0. States of every version load (NOTE [ mixture
        state ]).

        Raises:
            TypeError: ``state_dict`` is not a mapping, or its counts or config have the
                wrong type.
            ValueError: a key is missing or unknown, or the version is unknown.
            ReproducibilityError: a weight, the window, the seed, a shuffle setting, the
                parts, a shard set's shards or a shard's sample count changed, or a
                curriculum segment before the saved position; or shard sets were removed,
                reordered, inserted before the saved ones, or added before the saved
                position (the message names the change and the fix).
        """
        law = self._saved_part_law(state_dict)
        if law != self._config.get("part_shards"):
            self._set_part_law(law)  # a state saved before NOTE [ fixed part cover ]
        try:
            position = check_mix_state(
                state_dict,
                config=self._config,
                fingerprint_here=self._fingerprint,
                paths=self._mix_paths,
                counts=self._mix_counts,
                summaries=self._set_summaries(),
            )
        except Exception:
            if law != "run" and self._lanes is not None:
                self._set_part_law("run")  # a refused state leaves the mixture as it was
            raise
        self._seek(position)

    def _saved_part_law(self, state_dict: Any) -> str | None:
        """The parts law a state of this mixture's ``parts`` was saved under.

        ``"run"`` (NOTE [ fixed part cover ]) unless the state has the same ``parts`` and no
        ``part_shards``: then ``"epoch"``, each epoch's parts cut from that epoch's shard
        order, the law of states saved before it, which the mixture resumes in its order.
        """
        if self._lanes is None or not isinstance(state_dict, Mapping):
            return self._config.get("part_shards")
        config = state_dict.get("config")
        if not isinstance(config, Mapping) or "part_shards" in config:
            return "run"
        return "epoch" if config.get("parts") == self._config["parts"] else "run"

    def _set_part_law(self, law: str | None) -> None:
        """Rebuild each set's order and the lanes under the parts law ``law``."""
        plan, window, seed, lanes, counts, shuffle_shards, shuffle_window = self._lane_law
        orders = [
            ShardOrder(
                c, s, shuffle_shards, shuffle_window, self.shuffle_block_shards, p, law or "run"
            )
            for c, s, p in zip(counts, self.seeds, self.set_parts, strict=True)
        ]
        self._lanes = LaneOrder(plan, window, seed, lanes, orders)
        self._order = self._lanes  # type: ignore[assignment]
        self._config.pop("part_shards", None)
        if law == "run":  # absent: the earlier law, as a state saved under it says
            self._config["part_shards"] = "run"
        self._fingerprint = stable(self._config)


def _check_parts(parts: Any, count: int) -> list[int]:
    """Each of the ``count`` shard sets' parts, from one value or a list of ``count``.

    Examples:
        >>> _check_parts(6, 2), _check_parts([4, 0], 2), _check_parts(1, 1)
        ([6, 6], [4, 0], [0])
    """
    values = list(parts) if isinstance(parts, (list, tuple)) else [parts] * count
    if len(values) != count:
        raise ValueError(
            f"parts should be one part count for every shard set or a list of {count}, one "
            f"per shard set (0: that set in the plain order), but got a list of "
            f"{len(values)}: parts={list(parts)!r}"
        )
    name = "parts" if not isinstance(parts, (list, tuple)) else "parts[{}]"
    out = [check_int(name.format(k), v, minimum=0) for k, v in enumerate(values)]
    return [c if c > 1 else 0 for c in out]
