"""``WebDatasetMix``: several webdataset shard sets mixed with weights, exactly resumable.

The order is NOTE [ shard stream mixture ] (:mod:`._mix_order`); everything else (the
split, the batch grid, decoding, per-batch seeding, the loader) is the single source's,
except that ``decode`` and ``map`` may differ per shard set. A DataLoader worker keeps one
reader per shard set, so each set's reads stay sequential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from torch.utils.data import default_collate

from ..._errors import ReproducibilityError, check_int
from ..._mix import MixSampler
from ..._seeds import derive
from ..._state import check_header, fingerprint
from .._seeding import seed_globals
from ._decode import make_decoder
from ._fetch import RemoteOptions
from ._index import ShardInfo
from ._mix_order import MixOrder
from ._order import ShardOrder
from ._reader import ShardReader
from ._readers import ShardReaders
from ._source import WebDatasetSource
from ._state import STATE_VERSION
from ._urls import expand_urls

__all__ = ["WebDatasetMix"]

_STATE_KEYS = ("version", "position", "fingerprint", "config", "counts")
#: Keys a state carries for people to read, never checked: where each shard set is.
_INFORMATION = ("mixture",)
#: Configuration compared on load, in this order (the curriculum separately).
_CHECKED = ("seed", "weights", "window", "shuffle_shards", "shuffle_window", "shuffle_block_shards")
#: A checked key's value when a state or configuration leaves it out (it is off).
_ABSENT = {"shuffle_block_shards": 0}

#: One shard set's decoder and map, either of them None.
Stage = tuple[Callable[[dict[str, Any]], Any] | None, Callable[[Any], Any] | None]


class _MixReader(ShardReader):
    """One reader per shard set, so that each set's reads stay sequential.

    With the block shuffle (``block`` > 1), each set's reader is a :class:`ShardReaders`
    keeping up to ``2 * block`` of the set's shards open, as a single source's does.
    """

    def __init__(
        self,
        shards: Sequence[ShardInfo],
        options: RemoteOptions,
        offsets: list[int],
        block: int = 0,
    ) -> None:
        super().__init__(shards, options)
        self.offsets = offsets
        bounds = [*offsets[1:], len(shards)]
        self.parts: list[ShardReader | ShardReaders] = [
            ShardReaders(shards[a:b], min(2 * block, b - a), options)
            if block > 1
            else ShardReader(shards[a:b], options)
            for a, b in zip(offsets, bounds, strict=True)
        ]
        self.owner = [
            k for k, (a, b) in enumerate(zip(offsets, bounds, strict=True)) for _ in range(a, b)
        ]

    def read(self, shard: int, index: int) -> dict[str, Any]:
        k = self.owner[shard]
        return self.parts[k].read(shard - self.offsets[k], index)

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """:meth:`ShardReader.read_many`, each set's samples read by that set's reader."""
        out: list[dict[str, Any]] = [{}] * len(shards)
        by_set: dict[int, list[int]] = {}
        for i, shard in enumerate(shards):
            by_set.setdefault(self.owner[shard], []).append(i)
        for k, items in by_set.items():
            got = self.parts[k].read_many(
                [shards[i] - self.offsets[k] for i in items], [indexes[i] for i in items]
            )
            for i, sample in zip(items, got, strict=True):
                out[i] = sample
        return out

    def close(self) -> None:
        for part in self.parts:
            part.close()
        super().close()


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

    def __init__(
        self,
        urls: Sequence[str | Sequence[str]],
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
        index_dir: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        read_ahead: int = 4 << 20,
        seeding: str = "batch",
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
        _check_named(weights, curriculum, len(urls))
        seed = check_int("seed", seed)
        # The weights, window, curriculum, decode and map are checked before any shard is
        # indexed.
        MixSampler([range(1)] * len(urls), weights, seed, window=window, curriculum=curriculum)
        decoders, maps = _per_set_decode(decode, len(urls)), _per_set_map(map, len(urls))
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
        )
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])]).tolist()
        parts = [self.shards[a:b] for a, b in pairwise(offsets)]
        counts = [[len(s) for s in part] for part in parts]
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
            ShardOrder(c, s, shuffle_shards, shuffle_window, self.shuffle_block_shards)
            for c, s in zip(counts, self.seeds, strict=True)
        ]
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
            "shards": [fingerprint([{"shards": [_name(s) for s in part]}]) for part in parts],
        }
        if self.shuffle_block_shards:  # absent when off: states saved before it still load
            self._config["shuffle_block_shards"] = self.shuffle_block_shards
        self._fingerprint = _stable(self._config)
        self._mix_counts = counts
        self._mix_paths = [[s.path for s in part] for part in parts]

    def _reader(self) -> ShardReader:
        return _MixReader(self.shards, self.remote, self._offsets, self.shuffle_block_shards)

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

        ``epochs[k]`` is the passes shard set ``k`` has completed (``MixSampler.progress``).

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     w.write({"__key__": "k", "cls": b"0"})
            >>> path = os.path.join(folder, "s-0.tar")
            >>> WebDatasetMix([path, path], [1, 1], seed=0, batch_size=1).progress(4)
            {'position': 4, 'consumed': [2, 2], 'epochs': [2, 2]}
        """
        return self.mixture.progress(self.position if position is None else position)

    def state_dict(self) -> dict[str, Any]:
        """The resume state: the global position, what it is checked against, and progress.

        ``counts`` are each shard set's shards' sample counts; ``mixture`` shows each set's
        samples consumed and epochs completed (informational: loading ignores it).
        """
        return {
            "version": STATE_VERSION,
            "position": self.position,
            "fingerprint": self._fingerprint,
            "config": {**self._config, "shards": list(self._config["shards"])},
            "counts": [list(c) for c in self._mix_counts],
            "mixture": self.progress(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume at the state's position, on any world size, batch size or ``num_workers``.

        The curriculum may add or change segments that start at or after the saved
        position (as for ``MixSampler``), and shard sets appended to the saved ones may
        enter with such a segment (NOTE [ adding a component ]): the positions before it
        read what the saved run read, every saved set continues where it was and the new
        one starts at its own sample 0.

        Raises:
            TypeError: ``state_dict`` is not a mapping, or its counts or config have the
                wrong type.
            ValueError: a key is missing or unknown, or the version is unknown.
            ReproducibilityError: a weight, the window, the seed, a shuffle setting, a
                shard set's shards or a shard's sample count changed, or a curriculum
                segment before the saved position; or shard sets were removed, reordered,
                inserted before the saved ones, or added before the saved position (the
                message names the change and the fix).
        """
        position = check_header(state_dict, _STATE_KEYS, "WebDatasetMix", STATE_VERSION)
        unknown = sorted(str(key) for key in state_dict if key not in _STATE_KEYS + _INFORMATION)
        if unknown:
            raise ValueError(
                f"state has keys {', '.join(unknown)} that WebDatasetMix.state_dict() never "
                "writes; it was saved by another object or edited: pass the state it saved"
            )
        saved, counts = state_dict["config"], state_dict["counts"]
        if not isinstance(saved, Mapping):
            raise TypeError(
                "state['config'] should be the dict of settings from "
                f"WebDatasetMix.state_dict(), but got {saved!r}"
            )
        if not (isinstance(counts, list) and all(isinstance(c, list) for c in counts)):
            raise TypeError(
                "state['counts'] should be a list of lists of samples per shard, one per "
                f"shard set, from WebDatasetMix.state_dict(), but got {counts!r}"
            )
        changed = _differences(dict(saved), counts, self._config, self._mix_counts, position)
        for path_list, old, new in zip(self._mix_paths, counts, self._mix_counts, strict=False):
            if len(old) == len(new) and old != new:
                changed += [
                    f"shard {path!r} had {a} samples when the state was saved but has {b} now"
                    for path, a, b in zip(path_list, old, new, strict=True)
                    if a != b
                ]
        # With shard sets appended, the saved fingerprint is checked against the saved
        # configuration: the comparison above named every other difference.
        expected = self._fingerprint if len(counts) == len(self._mix_counts) else _stable(saved)
        if not changed and state_dict["fingerprint"] != expected:
            changed = ["the state's fingerprint does not match its configuration"]
        if changed:
            raise ReproducibilityError(
                f"cannot load this state into WebDatasetMix: {'; '.join(changed)}; resuming "
                "from it would train on other data. Rebuild the mixture as it was."
            )
        self._seek(position)


def _check_named(weights: Sequence[float], curriculum: Any, count: int) -> None:
    """Check how many shard sets ``weights`` and each curriculum segment name.

    ``weights`` names the sets mixed from position 0; a segment names at least as many as
    the one before it, and the last names all ``count``: a segment that names more adds
    sets from its start on, as for ``MixSampler`` (NOTE [ adding a component ]). Malformed
    entries are left to ``MixSampler``'s checks.

    Examples:
        >>> _check_named([1, 1], [(10, [1, 1, 2])], 3)
        >>> try:
        ...     _check_named([1, 1], [], 3)
        ... except ValueError as error:
        ...     print(str(error).split("; ")[1][:52])
        to add a shard set at a resume, append its urls last
    """
    entries: list[tuple[str, Any]] = [("weights", weights)]
    if isinstance(curriculum, Sequence) and not isinstance(curriculum, (str, bytes)):
        entries += [
            (f"curriculum[{i}] weights", entry[1])
            for i, entry in enumerate(curriculum)
            if isinstance(entry, Sequence) and len(entry) == 2
        ]
    low = 1
    for i, (name, values) in enumerate(entries):
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            return
        n = len(values)
        last = i == len(entries) - 1
        if n > count or (last and n < count) or (0 < n < low):
            fix = (
                f"; the segment before it names {low}, and a shard set cannot leave a mixture: "
                "give it weight 0 instead"
                if n < low
                else (
                    "; to add a shard set at a resume, append its urls last and name its "
                    "weight from the position it enters at: curriculum=[(position, "
                    f"[{count} weights])]"
                    if n < count
                    else ""
                )
            )
            raise ValueError(
                f"{name} should have one weight per shard set in urls ({count}), but got {n}: "
                f"{name}={list(values)!r}{fix}"
            )
        low = max(low, n)


def _stable(config: Mapping[str, Any]) -> str:
    """The fingerprint of a configuration, its curriculum left out.

    Segments still to come may change at a resume, and shard sets may be added with them.
    """
    return fingerprint(
        [{"source": "webdataset-mix", **{k: v for k, v in config.items() if k != "curriculum"}}]
    )


def _differences(
    saved: dict[str, Any],
    counts: list[list[Any]],
    config: Mapping[str, Any],
    here: list[list[int]],
    position: int,
) -> list[str]:
    """What differs between a saved mixture's configuration and this one, each named.

    Shard sets appended after the saved ones are no difference if they enter with a
    curriculum segment that starts at or after ``position`` (NOTE [ adding a component ]).

    Raises:
        ReproducibilityError: shard sets were removed, inserted before or among the saved
            ones while others were appended, or appended ones enter before ``position``.
    """
    old_k, new_k = len(counts), len(here)
    names = saved.get("shards")
    old_names = list(names) if isinstance(names, list) else []
    new_names = list(config["shards"])
    if new_k < old_k:
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetMix: it was saved with {old_k} shard sets, "
            f"but urls name {new_k}; a shard set cannot be removed at a resume, since the "
            "mixture law would change for the positions already trained. Keep every saved "
            "shard set in the saved order and give the one to drop weight 0 in a curriculum "
            f"segment from position {position} on: curriculum=[({position}, [{old_k} weights])]"
        )
    added = new_k - old_k
    if added and old_names[:old_k] != new_names[:old_k]:
        k = next(k for k in range(old_k) if k >= len(old_names) or old_names[k] != new_names[k])
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetMix: urls[{k}] is not the saved run's "
            f"urls[{k}] (other shard files or another order) while urls name {added} more "
            f"shard set{'s' if added > 1 else ''}; a shard set added at a resume goes last, "
            f"after the saved run's {old_k}, so that every saved set keeps its place. Keep the "
            "saved shard sets in their order and append the new ones"
        )
    out: list[str] = []
    for key in _CHECKED:
        old, new = saved.get(key, _ABSENT.get(key)), config.get(key, _ABSENT.get(key))
        if old == new:
            continue
        if key == "weights" and isinstance(old, list) and len(old) == len(new):
            out += [
                f"weights[{k}] is {a!r} in the state but {b!r} here"
                for k, (a, b) in enumerate(zip(old, new, strict=True))
                if a != b
            ]
        elif key == "weights" and added and len(new) > old_k:
            raise ReproducibilityError(
                f"cannot load this state into WebDatasetMix: urls[{old_k}:] enter this mixture "
                f"at position 0 (weights is {old!r} in the state but {new!r} here), before "
                f"position {position}, which the saved run had reached; keep the saved weights "
                f"and add them with a curriculum segment of {new_k} weights from position "
                f"{position} on: curriculum=[({position}, [{new_k} weights])]"
            )
        else:
            out.append(f"{key} is {old!r} in the state but {new!r} here")
    if (
        not added
        and old_names != new_names
        and sorted(map(str, old_names)) == sorted(map(str, new_names))
    ):
        out.append(
            "the shard sets are in another order than in the state; keep the saved order "
            "(a shard set added at a resume goes last)"
        )
    else:
        for k, names_k in enumerate(new_names[:old_k]):
            if (old_names[k] if k < len(old_names) else None) != names_k:
                out.append(
                    f"urls[{k}] names other shard files or another order than in the state "
                    f"({len(counts[k])} shards then, {len(here[k])} now)"
                )
    old_plan, new_plan = saved.get("curriculum"), config["curriculum"]
    if old_plan != new_plan:

        def past(plan: Any) -> list[Any]:
            if not isinstance(plan, list):
                return [plan]
            return [e for e in plan if isinstance(e, list) and e and e[0] < position]

        if past(old_plan) != past(new_plan):
            entering = next(
                (
                    e
                    for e in past(new_plan)
                    if added and len(e) > 1 and isinstance(e[1], list) and len(e[1]) > old_k
                ),
                None,
            )
            if entering is not None:
                raise ReproducibilityError(
                    f"cannot load this state into WebDatasetMix: urls[{old_k}:] enter the "
                    f"mixture at position {entering[0]} (a curriculum segment of "
                    f"{len(entering[1])} weights), before position {position}, which the "
                    f"saved run had already reached with {old_k} shard sets; start that "
                    f"segment at position {position} or later"
                )
            out.append(
                f"the curriculum changed before position {position}, which the saved run "
                f"had already reached (curriculum is {old_plan!r} in the state but "
                f"{new_plan!r} here); segments may only be added or changed from position "
                f"{position} on"
            )
    return out


def _per_set_decode(decode: Any, count: int) -> list[Any] | None:
    """Each of the ``count`` shard sets' decoders if ``decode`` is a per-set list, else None.

    A list of image specs and handlers only is one decoder for every set (webdataset's
    ``.decode(*args)``, as ``WebDatasetSource`` reads it); a list of ``count`` of them could
    mean either, so it is refused. Any other list is one entry per set.

    Examples:
        >>> _per_set_decode(("rgb8", "l8"), 2) is None  # a tuple: one decoder for both
        True
        >>> [d is None for d in _per_set_decode([None, "rgb8"], 2)]
        [True, False]
    """
    if not isinstance(decode, list):
        return None
    from webdataset import autodecode

    def handler(entry: Any) -> bool:
        return isinstance(entry, str) or (
            callable(entry) and not isinstance(entry, autodecode.Decoder)
        )

    if all(handler(entry) for entry in decode):
        if count >= 2 and len(decode) == count:
            wrapped = ", ".join(f"({entry!r},)" for entry in decode)
            raise ValueError(
                f"decode={decode!r} is ambiguous with {count} shard sets: a list of {count} "
                "image specs or handlers may be one decoder for every set or one per set; "
                f"pass a tuple, decode={tuple(decode)!r}, for one decoder with these "
                f"handlers for every set, or wrap each set's entry, decode=[{wrapped}], "
                "for one per set"
            )
        return None
    if len(decode) != count:
        raise ValueError(
            f"decode should be one decode value for every shard set or a list of {count}, "
            f"one per shard set (None: no decoding), but got a list of {len(decode)}: "
            f"decode={decode!r}; give each of the {count} sets an entry"
        )
    out: list[Any] = []
    for k, entry in enumerate(decode):
        try:
            out.append(make_decoder(entry))
        except TypeError:
            raise TypeError(
                f"decode[{k}] should be shard set {k}'s decode: an image spec such as "
                "'rgb8', a decoding handler, a tuple of these, a webdataset.autodecode."
                f"Decoder, or None for no decoding, but got decode[{k}]={entry!r} of type "
                f"{type(entry).__name__}"
            ) from None
    return out


def _per_set_map(fn: Any, count: int) -> list[Any] | None:
    """Each of the ``count`` shard sets' maps if ``fn`` is a per-set list, else None.

    Examples:
        >>> _per_set_map(len, 2) is None, _per_set_map([len, None], 2)
        (True, [<built-in function len>, None])
    """
    if not isinstance(fn, list):
        if fn is not None and not callable(fn):
            raise TypeError(
                "map should be a callable or None for every shard set, or a list of "
                f"{count} of them, one per shard set, but got map={fn!r} of type "
                f"{type(fn).__name__}; pass a function of one sample, or a list of them"
            )
        return None
    if len(fn) != count:
        raise ValueError(
            f"map should be one callable for every shard set or a list of {count}, one per "
            f"shard set (None: no map), but got a list of {len(fn)}: map={fn!r}; give each "
            f"of the {count} sets an entry"
        )
    for k, entry in enumerate(fn):
        if entry is not None and not callable(entry):
            raise TypeError(
                f"map[{k}] should be shard set {k}'s map, a callable or None (no map), but "
                f"got map[{k}]={entry!r} of type {type(entry).__name__}; pass a function of "
                "one sample"
            )
    return list(fn)


def _name(shard: ShardInfo) -> str:
    """A shard's file name: its folder or host may change between runs."""
    return shard.path.rsplit("/", 1)[-1]
