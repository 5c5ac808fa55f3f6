"""The trial's data: check the loaders, set their seed, shard and skip them.

NOTE [ trial data ]
A ``detsamplers.loader.DataLoader`` from ``build_training_data_loader`` is turned into
``get_data_loader(repeat=True, num_replicas=W, rank=r, skip_samples=S)``, where ``S`` is
the samples (records of every rank) already trained. The next global batch is then the
samples ``[S, S + G)`` of the shuffled, repeated stream (``G`` the global batch size now)
for every world size and every earlier batch size (NOTE [ sample positions ]). A resume
may therefore change the global batch size as well as the world size; the checkpoint
records ``samples_trained`` and a digest of the sample stream that any grid recomputes.
The trainer counts epochs in samples (NOTE [ epoch length ]); under a batch-size schedule
it rebuilds the loader with the new per-slot ``batch_size`` at each switch, from the
samples trained (NOTE [ batch size schedule ]).

A ``WebDatasetSource`` (or a ``WebDataLoader`` over one) is rebuilt the same way:
``source.for_rank(world_size=W, rank=r, skip_samples=S)``, in a ``WebDataLoader`` with the
user's worker options. Its next global batch is the stream positions ``[S, S + G)``
(NOTE [ shard stream split ]), an epoch is ``num_samples`` records, and the world size,
rank and skip it was built with are replaced. It must have ``repeat=True`` and
``batch_size`` equal to the per-slot batch size. Its rank state is the source's
``state_dict()`` plus a digest, free of world size and batch size, of the shards and of
the ``(shard, sample)`` at positions 0 and ``S - 1``, checked on load; a changed shard
list, shard count or order configuration is refused with :class:`~detsamplers.ReproducibilityError`.

Seed policy: a loader built without ``seed`` (and without ``generator``) gets the trial
seed; one built with its own seed keeps it. The loader cannot tell ``seed=0`` from no
seed, so an explicit 0 also takes the trial seed. A ``WebDatasetSource`` requires its
``seed``, so it always keeps it: pass ``seed=context.get_trial_seed()`` to follow the
trial seed. The data seed in use is saved in the checkpoint and a resume that changes it
is refused.

Any other loader raises :class:`~detsamplers.ReproducibilityError` unless the trial called
``context.experimental.disable_dataset_reproducibility_checks()``; it is then used as
given, and the trial skips ``context.get_initial_batch()`` batches itself.

NOTE [ trial growth ]
A checkpoint records the dataset's growth history, ``dataset_growth = [[0, N0], [p1, N1],
...]`` (the last length is ``dataset_length``). A resume that finds ``len(dataset)`` larger
than the last length records a growth at the samples trained, ``[S, N']``, only if
``Trainer.fit(..., dataset_growth=True)``; otherwise, and for a smaller dataset always,
it is refused naming both lengths. With a history of more than one length the trainer
builds the training chain over a :class:`~detsamplers.GrowingShuffleSampler` with the
whole history (NOTE [ growth law ]) instead of the loader's plain shuffle, which it
equals before the first growth. So the pass that grew reads every old record it had not
read and every new record once, later passes are shuffles of ``N'``, the history is in
the chain's fingerprint, and a later resume rebuilds the same stream from the checkpoint
(the opt-in is needed only to record a new growth). The clock counts epochs of
``len(dataset)`` samples from the epoch's saved first sample, so the epoch that grew holds
``N'`` samples in all, as the pass that grew does. The loader's saved state and the
global digest are checked against the configuration the checkpoint was saved with
(:meth:`MapData.as_saved`). Growth needs ``DataLoader(dataset, shuffle=True)`` or a
mixture (NOTE [ trial mixture ]): another ``sampler``/``batch_sampler`` of the user's or a
``WebDatasetSource`` is refused with ``dataset_growth=True``.

NOTE [ trial mixture ]
A ``DataLoader(ConcatDataset(datasets), sampler=MixSampler(...))`` may change its
curriculum from the samples trained on, and may gain a dataset appended last that enters
with a curriculum segment from there on (NOTE [ adding a component ]). The user's code
builds the changed mixture; the trainer checks it against the saved one. The global
digest cannot do that on another grid, since it hashes the configuration of now; so on a
grid other than the saved one (world size or global batch size) each rank loads a saved
loader state, its own on the same world size and rank 0's otherwise, into its chain. The
loader checks that state on any grid (the mixture's past, the components, the records at
the probes) and names what changed. Adding a dataset changes ``len(dataset)``, so it needs
``Trainer.fit(..., dataset_growth=True)`` as a growth does, and is recorded the same way:
``[S, N']`` appended to ``dataset_growth``. The trainer does not replace the mixture's
sampler (the curriculum says how the records enter), and an epoch is ``len(dataset)``
samples from the epoch's saved first sample, as after a growth: the epoch running at the
resume ends ``N'`` samples after its first one, later ones are ``N'`` long. A later resume
rebuilds the mixture from the user's code and the checkpoint's loader states refuse one
whose past differs (a dropped segment, a removed dataset).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import torch.utils.data as tud

from .._errors import ReproducibilityError
from .._grow import GrowingShuffleSampler
from .._mix import MixSampler
from ..loader import DataLoader, WebDataLoader, WebDatasetSource
from ..loader._dataloader import DEFAULT_SEED
from ..loader._wds._source_parts import adopt_parts
from ._context import TrialContext

__all__ = [
    "MapData",
    "ShardData",
    "TrainingData",
    "checked_loader",
    "global_batch",
    "grown_data",
    "inferred_global_batch",
    "records_per_epoch",
    "training_data",
    "validation_loader",
]

_FIX = (
    "return detsamplers.loader.DataLoader(dataset, batch_size="
    "context.get_per_slot_batch_size(), shuffle=True) or a "
    "detsamplers.loader.WebDatasetSource from {method}, which the trainer "
    "shards, repeats and skips; or call "
    "context.experimental.disable_dataset_reproducibility_checks() in __init__ and skip "
    "context.get_initial_batch() batches yourself"
)


def checked_loader(
    loader: Any, context: TrialContext, method: str, training: bool = True
) -> DataLoader | None:
    """``loader`` with its seed set, or None for an unchecked loader (NOTE [ trial data ])."""
    if not isinstance(loader, DataLoader):
        if context.experimental.dataset_reproducibility_checks:
            raise ReproducibilityError(
                f"{method} should return a detsamplers.loader.DataLoader or WebDatasetSource, "
                f"but got "
                f"{type(loader).__name__}: a plain loader restarts from its first batch on "
                f"resume and shards nothing; {_FIX.format(method=method)}"
            )
        return None
    per_slot = context.get_per_slot_batch_size() if training else None
    if per_slot is not None and loader.batch_size not in (None, per_slot):
        raise ValueError(
            f"the batch_size of the DataLoader from {method} should be "
            f"context.get_per_slot_batch_size()={per_slot}, but got "
            f"batch_size={loader.batch_size}; the global batch is per-slot batch size times "
            "the world size"
        )
    if loader.seed == DEFAULT_SEED and loader.generator is None:
        loader.seed = context.get_trial_seed()
    return loader


def inferred_global_batch(loader: Any, context: TrialContext) -> int:
    """The global batch size of a run without ``hparams["global_batch_size"]``.

    Determined's local mode trains such a trial on its loader's batches, so the global
    batch is the training loader's ``batch_size`` times the world size.
    """
    shards = _shard_source(loader)
    per_slot = shards[0].batch_size if shards is not None else getattr(loader, "batch_size", None)
    if not isinstance(per_slot, int) or isinstance(per_slot, bool) or per_slot < 1:
        raise ValueError(
            "hparams should set 'global_batch_size', or build_training_data_loader should "
            f"return a loader with a positive integer batch_size, but got batch_size={per_slot!r} "
            "and no 'global_batch_size'; pass init(hparams={'global_batch_size': ...}), which "
            "the trainer needs to count epochs and to resume on another world size"
        )
    return per_slot * context.distributed.get_size()


def records_per_epoch(loader: Any) -> int:
    """``len(loader.dataset)``: the records in one epoch."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"the training loader should have a sized dataset, but got {type(loader).__name__} "
            "whose dataset has no len(); epochs are counted in records of the dataset"
        )
    return len(dataset)


def global_batch(loader: DataLoader, position: int, size: int) -> list[int]:
    """The records of global batch ``position`` in stream order, from every rank's share.

    Examples:
        >>> loader = DataLoader(range(10), batch_size=2, shuffle=True, seed=3)
        >>> global_batch(loader, 2, 2) == global_batch(loader, 4, 1) + global_batch(loader, 5, 1)
        True
    """
    shares = []
    for rank in range(size):
        chain = loader.get_data_loader(True, position, size, rank).batch_sampler
        shares.append([int(i) for i in next(iter(chain))])  # type: ignore[arg-type]
    return [share[j] for j in range(len(shares[0])) for share in shares if j < len(share)]


def _digest(fields: list[Any]) -> str:
    text = json.dumps(fields, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class MapData:
    """A ``DataLoader``'s training stream for the trainer (NOTE [ trial data ])."""

    #: A resume may change the global batch size (NOTE [ sample positions ]).
    elastic_batch = True

    def __init__(self, loader: DataLoader, history: list[list[int]] | None = None) -> None:
        self.loader = loader
        self.seed = loader.seed
        self.records = records_per_epoch(loader)
        #: The growth history ``[[0, N0], [p1, N1], ...]`` (NOTE [ trial growth ]).
        self.history = [[0, self.records]] if history is None else history
        #: A ``MixSampler`` draws the stream (NOTE [ trial mixture ]).
        self.mixture = isinstance(loader.sampler, MixSampler)
        self._saved: MapData | None = None

    def grown(self, history: list[list[int]]) -> MapData:
        """This data over a shuffle with the growth ``history`` (NOTE [ trial growth ]).

        Examples:
            >>> data = MapData(DataLoader(range(6), batch_size=2, shuffle=True, seed=3))
            >>> grown = data.grown([[0, 4], [2, 6]])
            >>> grown.records, type(grown.loader.sampler).__name__
            (6, 'GrowingShuffleSampler')
            >>> global_batch(grown.loader, 0, 1) == global_batch(
            ...     MapData(DataLoader(range(4), batch_size=2, shuffle=True, seed=3)).loader, 0, 1)
            True
        """
        if len(history) == 1 or self.mixture:  # a mixture says itself how records enter
            return MapData(self.loader, history)
        loader = copy.copy(self.loader)
        growth = [(int(at), int(size)) for at, size in history[1:]]
        loader.sampler = GrowingShuffleSampler(
            tud.SequentialSampler(loader.dataset),
            loader.seed,
            initial_length=int(history[0][1]),
            growth=growth,
        )
        loader.shuffle, loader._passes = False, None
        return MapData(loader, history)

    def as_saved(self) -> MapData:
        """The data as the checkpoint resumed from had it: before a growth recorded now."""
        return self if self._saved is None else self._saved

    def resized(self, batch_size: int | None) -> DataLoader:
        """The user's loader with another per-slot ``batch_size`` (NOTE [ batch size schedule ])."""
        loader = self.loader
        if batch_size is None or batch_size == loader.batch_size:
            return loader
        if loader.batch_size is None:
            raise ValueError(
                "the DataLoader from build_training_data_loader should take batch_size= to "
                "follow a global_batch_size schedule, but it has a batch_sampler; pass "
                "batch_size=context.get_per_slot_batch_size() (and sampler= or shuffle=), or "
                "use one global_batch_size"
            )
        out = copy.copy(loader)
        out.batch_size, out._passes = batch_size, None
        return out

    def build(self, samples: int, size: int, rank: int, batch_size: int | None = None) -> Any:
        """The torch loader of rank ``rank`` of ``size``, from sample ``samples``.

        ``batch_size`` is the per-slot size (default: the user's loader's).
        """
        loader = self.resized(batch_size)
        return loader.get_data_loader(True, 0, size, rank, skip_samples=samples)

    def state(
        self, samples: int, size: int, rank: int, batch_size: int | None = None
    ) -> dict[str, Any]:
        """The rank state at sample ``samples``: the batch sampler's."""
        built = self.build(samples, size, rank, batch_size)
        state: dict[str, Any] = built.batch_sampler.state_dict()
        return state

    def load(self, built: Any, state: dict[str, Any]) -> None:
        """Resume ``built`` (from :meth:`build`) at ``state``, checking its digest."""
        built.batch_sampler.load_state_dict(state)

    def global_digest(self, samples: int, size: int) -> str:
        """A digest of the sample stream before ``samples``, free of world and batch size."""
        digest: str = self.build(samples, 1, 0).batch_sampler.samples_digest(samples)
        return digest


class ShardData:
    """A ``WebDatasetSource``'s training stream for the trainer (NOTE [ trial data ])."""

    #: A resume may change the global batch size (NOTE [ shard stream split ]).
    elastic_batch = True
    #: A shard stream does not grow (NOTE [ trial growth ]).
    history: list[list[int]] | None = None

    def __init__(self, source: WebDatasetSource, loader: WebDataLoader | None = None) -> None:
        self.source = source
        self.loader = loader
        self.seed = source.seed
        self.records = source.num_samples

    def build(
        self, samples: int, size: int, rank: int, batch_size: int | None = None
    ) -> WebDataLoader:
        """A ``WebDataLoader`` with the user's worker options over the rank's source.

        ``batch_size`` is the per-slot size (default: the user's source's).
        """
        source = self.source.for_rank(
            world_size=size, rank=rank, skip_samples=samples, batch_size=batch_size
        )
        user = self.loader
        if user is None:
            return WebDataLoader(source)
        return WebDataLoader(
            source,
            user.num_workers,
            pin_memory=user.pin_memory,
            timeout=user.timeout,
            worker_init_fn=user.worker_init_fn,
            multiprocessing_context=user.multiprocessing_context,
            prefetch_factor=user.prefetch_factor,
        )

    def state(
        self, samples: int, size: int, rank: int, batch_size: int | None = None
    ) -> dict[str, Any]:
        """The rank state at sample ``samples``: the source's, plus the global digest."""
        source = self.source.for_rank(
            world_size=size, rank=rank, skip_samples=samples, batch_size=batch_size
        )
        state = source.state_dict()
        return {**state, "digest": self.global_digest(samples, size)}

    def load(self, built: WebDataLoader, state: dict[str, Any]) -> None:
        """Resume ``built`` at ``state``: the shards and order checked, then the digest.

        The user's source takes the state's parts law too (NOTE [ parts chosen at load ]),
        so that the digests and the states saved later, and the loaders rebuilt from it,
        follow the order the run resumed in.
        """
        adopt_parts(self.source, state)
        built.load_state_dict({k: v for k, v in state.items() if k != "digest"})
        source = built.source
        here = self.global_digest(source.position, source.world_size)
        if state.get("digest") != here:
            raise ReproducibilityError(
                "cannot resume the WebDatasetSource: the samples of the global batches "
                f"trained differ from the saved run's (digest {state.get('digest')!r} in the "
                f"checkpoint but {here!r} here); rebuild the source as it was saved"
            )

    def as_saved(self) -> ShardData:
        """The data as the checkpoint had it: the same (a shard stream does not grow)."""
        return self

    def global_digest(self, samples: int, size: int) -> str:
        """A digest of the samples trained, free of world size and batch size.

        It hashes the shards' configuration and counts, ``samples``, and the
        ``(shard, sample)`` pairs at positions 0 and ``samples - 1`` (nothing is read).
        """
        source = self.source
        located = source.locate(sorted({0, samples - 1})) if samples else []
        state = source.state_dict()
        counts = [len(shard) for shard in source.shards]  # as when states listed them
        return _digest([state["fingerprint"], counts, samples, located])


TrainingData = MapData | ShardData


def _shard_source(loader: Any) -> tuple[WebDatasetSource, WebDataLoader | None] | None:
    if isinstance(loader, WebDataLoader):
        return loader.source, loader
    if isinstance(loader, WebDatasetSource):
        return loader, None
    return None


def training_data(loader: Any, context: TrialContext) -> TrainingData | None:
    """The trainer's view of the training loader, or None for an unchecked one.

    Raises:
        ValueError: a ``WebDatasetSource``'s ``batch_size`` is not the per-slot batch size,
            or it has ``repeat=False``.
        ReproducibilityError: the loader cannot resume, and checks are on.
    """
    method = "build_training_data_loader"
    shards = _shard_source(loader)
    if shards is None:
        checked = checked_loader(loader, context, method)
        return None if checked is None else MapData(checked)
    source, user = shards
    per_slot = context.get_per_slot_batch_size()
    if source.batch_size != per_slot:
        raise ValueError(
            f"the batch_size of the WebDatasetSource from {method} should be "
            f"context.get_per_slot_batch_size()={per_slot}, but got "
            f"batch_size={source.batch_size}; the global batch is per-slot batch size times "
            "the world size"
        )
    if not source.repeat:
        raise ValueError(
            f"the WebDatasetSource from {method} should have repeat=True, but got "
            "repeat=False; the trainer counts batches and epochs in records, across passes"
        )
    return ShardData(source, user)


def _growable(data: TrainingData | None, need: str = "dataset_growth=True needs") -> MapData:
    """``data`` if growth may be recorded on it, else a ``ValueError`` naming why."""
    fix = (
        "return detsamplers.loader.DataLoader(dataset, batch_size=..., shuffle=True) from "
        "build_training_data_loader, or drop dataset_growth"
    )
    if isinstance(data, ShardData):
        raise ValueError(
            f"{need} a map-style detsamplers.loader.DataLoader with "
            f"shuffle=True, but build_training_data_loader returned a "
            f"{type(data.source).__name__}: a shard stream's order is fixed by its shard "
            "list, and growing it is not offered; "
            "start a new run over the new shards, or drop dataset_growth"
        )
    if data is None:
        raise ValueError(
            f"{need} a detsamplers.loader.DataLoader, but the training "
            "loader is used as given (dataset reproducibility checks are disabled); " + fix
        )
    loader = data.loader
    if data.mixture and loader.batch_sampler is None:  # NOTE [ trial mixture ]
        return data
    if loader.batch_sampler is not None or loader.sampler is not None or not loader.shuffle:
        what = (
            "a batch_sampler"
            if loader.batch_sampler is not None
            else f"sampler={type(loader.sampler).__name__}"
            if loader.sampler is not None
            else "shuffle=False"
        )
        raise ValueError(
            f"{need} the DataLoader from build_training_data_loader to "
            f"shuffle itself (shuffle=True, no sampler or batch_sampler), but it has {what}: "
            "the trainer replaces that shuffle by a GrowingShuffleSampler with the recorded "
            "growth (or pass sampler=MixSampler, whose own curriculum adds a dataset); " + fix
        )
    return data


def grown_data(
    data: TrainingData | None,
    saved: dict[str, Any] | None,
    samples: int,
    growth: bool,
    path: str | None,
) -> TrainingData | None:
    """The training data with the checkpoint's growth history, plus any new growth.

    NOTE [ trial growth ]: ``growth`` is ``fit``'s ``dataset_growth`` opt-in and
    ``samples`` the samples the checkpoint at ``path`` trained.

    Raises:
        ValueError: ``growth`` over a loader that cannot grow, or a growth at sample 0.
        ReproducibilityError: the dataset shrank, or grew without ``growth``, or the
            checkpoint recorded growth but the loader does not shuffle itself.
    """
    if growth:
        data = _growable(data)
    if saved is None or not isinstance(data, MapData):
        return data
    history = saved.get("dataset_growth") or [[0, saved.get("dataset_length")]]
    old, new = history[-1][1], data.records
    if not isinstance(old, int):
        return data  # a checkpoint without a dataset length: nothing to compare
    if len(history) > 1:  # the chain must be rebuilt with the recorded growth
        data = _growable(data, f"the dataset growth {history} recorded in {path} needs")
    if new == old:
        return data.grown(history)
    if new < old:
        raise ReproducibilityError(
            f"cannot resume from {path}: dataset_length is {old} in the checkpoint but {new} "
            "here, and a dataset may only grow during a run (dataset_growth=True records a "
            f"growth, never a shrink); restore the {old} records, or start a fresh run in "
            "another checkpoint_dir"
        )
    if not growth and data.mixture:
        raise ReproducibilityError(
            f"cannot resume from {path}: dataset_length is {old} in the checkpoint but {new} "
            "here, over a MixSampler; resuming would train on other data than the "
            "uninterrupted run. Pass Trainer.fit(..., dataset_growth=True) to record the "
            f"{new - old} records added at sample {samples} (a sampler appended last, entering "
            f"with a curriculum segment from position {samples} on), or restore the {old} "
            "records"
        )
    if not growth:
        raise ReproducibilityError(
            f"cannot resume from {path}: dataset_length is {old} in the checkpoint but {new} "
            "here; resuming would train on other data than the uninterrupted run. Pass "
            f"Trainer.fit(..., dataset_growth=True) to record a growth to {new} records at "
            f"sample {samples} (the rest of the epoch reads every record not yet read once), "
            f"or restore the {old} records"
        )
    if samples == 0:
        raise ValueError(
            f"dataset_growth=True records a growth at the samples trained, but the checkpoint "
            f"{path} has trained 0 samples; start a fresh run over the {new} records instead"
        )
    grown = data.grown([*history, [samples, new]])
    if data.mixture:  # the loader checks the saved state on any grid (NOTE [ trial mixture ])
        return grown
    before = copy.copy(data.loader)
    before.dataset, before._passes = tud.Subset(data.loader.dataset, range(old)), None
    grown._saved = MapData(before).grown(history)
    return grown


def validation_loader(trial_loader: Any, context: TrialContext, full: bool) -> Any:
    """The torch loader a rank validates on: its shard, or all of it for ``full``."""
    dist = context.distributed
    shards = _shard_source(trial_loader)
    if shards is not None:
        if shards[0].repeat:
            raise ValueError(
                "the WebDatasetSource from build_validation_data_loader should have "
                "repeat=False, but got repeat=True; validation is one pass"
            )
        size, rank = (1, 0) if full else (dist.get_size(), dist.get_rank())
        return ShardData(*shards).build(0, size, rank)
    loader = checked_loader(trial_loader, context, "build_validation_data_loader", False)
    if loader is None:
        return trial_loader
    if full:
        return loader.get_data_loader(repeat=False)
    return loader.get_data_loader(False, 0, dist.get_size(), dist.get_rank())
