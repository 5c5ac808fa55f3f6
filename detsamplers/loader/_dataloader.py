"""``DataLoader``: torch's and Determined's arguments, a reproducible chain underneath.

NOTE [ loader iteration ]
``get_data_loader`` returns a real ``torch.utils.data.DataLoader`` whose batch sampler
is a :class:`~detsamplers.loader._batches.LoaderBatchSampler` over the core chain, whose
dataset is the user's own, and whose fetch seeds the global RNGs per batch
(NOTE [ per-batch seeding ], NOTE [ seeded fetch ]). Its ``state_dict()`` and
``load_state_dict()`` count the batches handed to the caller (NOTE [ handed batches ]):

- ``repeat=True`` (training): [shuffle →] repeat → shard → batch → skip over records, or
  repeat → shard → skip over a user's ``batch_sampler``. The stream is endless, any skip
  costs O(1), and with the same global batch (``batch_size * num_replicas``) the global
  batches are the same for any world size.
- ``repeat=False`` (validation): [shuffle →] shard → batch. Each ``iter()`` is the next
  pass (a shuffle reshuffles each pass). Shards are uneven, never padded: over ``N``
  records the first ``N % W`` ranks get one record more (NOTE [ shard lengths ]), and
  ``len()`` is this rank's exact count of batches: ``ceil(n_r / batch_size)`` (or
  ``n_r // batch_size`` with ``drop_last``) for its ``n_r = N // W + (N % W > r)``
  records, so it can differ between ranks. Records are sharded before they are batched
  (the seeds' rule 004), unlike ``det.pytorch.DataLoader``, which shards whole batches
  (docs/porting.md shows the difference).

- ``sampler=MixSampler(...)`` over ``ConcatDataset(datasets)``: mix → shard → batch →
  skip, training only (a mixture is endless and repeats each component itself).

A dataset that reads each record's epoch (``getitems_in_epochs``) gets it from the
record's sample position (NOTE [ epoch-aware datasets ]); a ``ConcatDataset`` or ``Subset`` of
such datasets is refused (it would hide the epochs), and so is a training stream over a
``batch_sampler`` (its records have no sample positions).

Iterating this ``DataLoader`` directly (``for batch in loader``, ``len(loader)``) is
``get_data_loader(repeat=False)`` on one rank, built once and reused, so it behaves like
torch's DataLoader: one pass per ``iter()``, reshuffled each pass when ``shuffle=True``,
and ``persistent_workers`` persist across passes.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.data as tud

from .._errors import check_bool, check_callable, check_int, check_one_of
from .._repeat import RepeatBatchSampler, RepeatSampler
from .._seeds import derive
from .._shard import DistributedBatchSampler, DistributedSampler
from .._shuffle import ReproducibleShuffleSampler
from .._source import as_node, chain_of
from ._batches import LoaderBatchSampler
from ._check import check_chain
from ._epochs import data_fields, epoch_aware, epochs_matter
from ._fetch import SeededView, seeded_fetch_supported, seeded_kind
from ._frameworks import ShardView, attach_shard_view
from ._inline import InlineCollate
from ._lean import LeanDataLoader

__all__ = ["DEFAULT_SEED", "DataLoader"]

#: The seed used when neither ``seed`` nor ``generator`` is given.
DEFAULT_SEED = 0


def _check_dataset(dataset: Any) -> None:
    if isinstance(dataset, tud.IterableDataset):
        raise TypeError(
            "dataset should be a map-style dataset (with __len__ and __getitem__), but got an "
            f"IterableDataset ({type(dataset).__name__}): detsamplers.loader.DataLoader "
            "addresses records by index to resume in O(1); for a stream of tar shards use "
            "detsamplers.loader's webdataset source instead"
        )
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError(
            "dataset should be a map-style dataset with __len__ and __getitem__, but got "
            f"{type(dataset).__name__}"
        )
    _dataset_length(dataset)


def _dataset_length(dataset: Any) -> int:
    """``len(dataset)``, or a ``TypeError`` naming the dataset when its ``__len__`` fails."""
    try:
        return len(dataset)
    except Exception as error:
        raise TypeError(
            f"dataset should report its number of records with len(), but "
            f"len(dataset) raised {type(error).__name__}: {error} (dataset of type "
            f"{type(dataset).__name__}); fix its __len__ to return a non-negative int"
        ) from error


def _check_epoch_routing(dataset: Any) -> None:
    """Refuse a ``ConcatDataset`` or ``Subset`` that would hide epochs from the loader."""
    if epoch_aware(dataset):
        return
    if isinstance(dataset, tud.Subset) and epoch_aware(dataset.dataset):
        raise ValueError(
            f"dataset should pass each record's epoch to the dataset it wraps, but got a "
            f"Subset of a {type(dataset.dataset).__name__}, which reads epochs "
            "(getitems_in_epochs) and would read epoch 0 forever; pass the dataset itself "
            "with sampler=<the subset's indices> instead"
        )
    if not isinstance(dataset, tud.ConcatDataset):
        return
    for i, part in enumerate(dataset.datasets):
        if epoch_aware(part):
            raise ValueError(
                f"dataset should pass each record's epoch to its parts, but got a "
                f"ConcatDataset whose datasets[{i}] ({type(part).__name__}) reads epochs "
                "(getitems_in_epochs) and would read epoch 0 forever; mix token sequences "
                "with detsamplers.tokens.TokenMixture instead"
            )


def _check_user_sampler(name: str, sampler: Any) -> None:
    if not hasattr(sampler, "__iter__"):
        raise TypeError(f"{name} should be an iterable sampler, but got {type(sampler).__name__}")
    verbs = {link.verb for link in chain_of(as_node(sampler))}
    built = sorted(verbs & {"repeat", "shard", "skip"})
    if built:
        raise ValueError(
            f"{name} should not contain a {', '.join(built)} stage, but it does: "
            "get_data_loader adds repeat, shard and skip itself (repeat=, num_replicas=, "
            f"rank=, skip=); pass the {name} they should wrap"
        )
    check_chain(sampler)


def _check_mixture(dataset: Any, sampler: Any) -> None:
    links = chain_of(as_node(sampler))
    mixture = links[-1]
    if mixture.verb != "mix":
        raise ValueError(
            "sampler should be finite (get_data_loader adds the repeat), but got an endless "
            f"{type(sampler).__name__}; pass the sampler the repeat should wrap"
        )
    if len(dataset) != mixture.pass_length:
        raise ValueError(
            f"dataset should have the {mixture.pass_length} records of the mixture's "
            f"components (lengths {mixture.config()['lengths']}), but got len(dataset)="
            f"{len(dataset)}; pass ConcatDataset(datasets) of the mixed datasets, in order"
        )


class DataLoader:
    """A reproducible DataLoader: order and random draws are functions of seed and position.

    Takes torch's (and Determined's) arguments, validated the same way, plus ``seed``.
    ``len(loader)`` and ``for batch in loader`` behave like torch's DataLoader
    (NOTE [ loader iteration ]); trainers call :meth:`get_data_loader`.

    Args:
        dataset: A map-style dataset; an ``IterableDataset`` is refused.
        batch_size: Records per batch on each rank, a positive integer.
        shuffle: Shuffle records with a keyed permutation of ``(seed, pass)``.
        sampler: A sampler of dataset indices to use instead of reading them in order
            (exclusive with ``shuffle``); it must not contain a repeat, shard or skip. A
            :class:`~detsamplers.MixSampler` mixes datasets: pass ``ConcatDataset`` of
            them as ``dataset`` and use ``get_data_loader(repeat=True)``.
        batch_sampler: A batch sampler, exclusive with ``batch_size``, ``shuffle``,
            ``sampler`` and ``drop_last``.
        num_workers: Worker processes, ``>= 0``. A batch whose tensors hold under 64 KiB
            comes back from a worker by value rather than through shared memory
            (NOTE [ inline batches ]).
        collate_fn: Merges a list of samples into a batch (torch's default if None).
        pin_memory: Passed to torch's DataLoader.
        drop_last: Drop each pass's short last batch (validation passes only: a repeated
            stream has none).
        timeout: Seconds to wait for a batch from the workers, ``>= 0``.
        worker_init_fn: Called in each worker, as in torch, before any batch is seeded.
        multiprocessing_context: The workers' start method (needs ``num_workers > 0``).
        generator: If given and ``seed`` is not, ``seed = generator.initial_seed()``.
        prefetch_factor: Batches loaded in advance per worker (needs ``num_workers > 0``).
        persistent_workers: Keep workers alive between passes (needs ``num_workers > 0``).
        seed: Keys the shuffle and the per-batch RNG seeding; defaults to the generator's
            initial seed, else to ``DEFAULT_SEED`` (0). The trial loop passes the trial seed.
        seeding: ``"batch"`` (default): the global RNGs are seeded once per batch from
            ``(seed, batch position)``; ``"record"``: each record's ``__getitem__`` runs
            under RNGs seeded from ``(seed, its sample position)``, so a record draws the
            same values whatever the batch size and world size, at one seeding per record
            (needs ``batch_size=``, not a ``batch_sampler``; NOTE [ per-batch seeding ]).

    Raises:
        TypeError: an argument has the wrong type, or ``dataset`` is an IterableDataset.
        ValueError: an argument is out of range, or arguments exclude each other.
        ReproducibilityError: ``sampler``/``batch_sampler`` uses torch's RandomSampler or
            is ordered so that it cannot be resumed (see ``check_reproducible``).

    Determinism:
        Batch contents, and the values ``__getitem__`` draws from torch, numpy and
        ``random``, depend only on the seed and the batch's global position: not on
        ``num_workers``, the global RNG, or where the run was resumed. The process that
        fetches a batch keeps that batch's RNG stream afterwards; with ``num_workers=0``
        that is the main process (NOTE [ per-batch seeding ]).

    Examples:
        >>> loader = DataLoader(range(10), batch_size=4, shuffle=True, seed=1)
        >>> len(loader), [len(b) for b in loader]
        (3, [4, 4, 2])
        >>> first = next(iter(loader.get_data_loader(repeat=True, skip=1)))
        >>> second = next(iter(loader.get_data_loader(repeat=True, skip=1)))
        >>> bool((first == second).all())
        True
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = False,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        seed: int | None = None,
        seeding: str = "batch",
    ) -> None:
        _check_dataset(dataset)
        shuffle = check_bool("shuffle", False if shuffle is None else shuffle)
        drop_last = check_bool("drop_last", drop_last)
        pin_memory = check_bool("pin_memory", pin_memory)
        persistent_workers = check_bool("persistent_workers", persistent_workers)
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    f"sampler, and drop_last, but got batch_size={batch_size!r}, "
                    f"shuffle={shuffle}, sampler={sampler!r}, drop_last={drop_last}; "
                    "set the batch size and order in the batch_sampler itself"
                )
            _check_user_sampler("batch_sampler", batch_sampler)
        else:
            if batch_size is None:
                raise ValueError(
                    "batch_size should be a positive integer value, but got batch_size=None: "
                    "per-batch seeding and resume count batches; pass batch_size=1 to load "
                    "single records"
                )
            batch_size = check_int("batch_size", batch_size, minimum=1)
        if sampler is not None:
            if shuffle:
                raise ValueError(
                    "sampler option is mutually exclusive with shuffle, but got shuffle=True "
                    "and a sampler; shuffle inside the sampler, e.g. "
                    "ReproducibleShuffleSampler(sampler, seed), or drop the sampler"
                )
            _check_user_sampler("sampler", sampler)
        num_workers = check_int("num_workers", num_workers, minimum=0)
        check_callable("collate_fn", collate_fn)
        check_callable("worker_init_fn", worker_init_fn)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(
                f"timeout should be a non-negative number, but got timeout={timeout!r} "
                f"of type {type(timeout).__name__}"
            )
        if timeout < 0:
            raise ValueError(f"timeout should be a non-negative number, but got timeout={timeout}")
        if multiprocessing_context is not None:
            if num_workers == 0:
                raise ValueError(
                    "multiprocessing_context can only be used with multi-process loading, but "
                    "got num_workers=0; set num_workers > 0 or multiprocessing_context=None"
                )
            methods = multiprocessing.get_all_start_methods()
            if isinstance(multiprocessing_context, str) and multiprocessing_context not in methods:
                raise ValueError(
                    f"multiprocessing_context should be one of {', '.join(methods)}, but got "
                    f"multiprocessing_context={multiprocessing_context!r}"
                )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator should be a torch.Generator or None, but got {type(generator).__name__}"
            )
        if prefetch_factor is not None:
            prefetch_factor = check_int("prefetch_factor", prefetch_factor, minimum=1)
            if num_workers == 0:
                raise ValueError(
                    f"prefetch_factor can only be set with multi-process loading, but got "
                    f"prefetch_factor={prefetch_factor} with num_workers=0; set num_workers > 0 "
                    "or prefetch_factor=None"
                )
        if persistent_workers and num_workers == 0:
            raise ValueError(
                "persistent_workers=True needs multi-process loading, but got num_workers=0; "
                "set num_workers > 0 or persistent_workers=False"
            )
        _check_epoch_routing(dataset)
        user = batch_sampler if batch_sampler is not None else sampler
        endless = user is not None and as_node(user).infinite
        if endless:
            _check_mixture(dataset, user)
        if seed is None:
            seed = int(generator.initial_seed()) if generator is not None else DEFAULT_SEED
        else:
            seed = check_int("seed", seed)
        seeding = check_one_of("seeding", seeding, ("batch", "record"))
        if seeding == "record" and batch_sampler is not None:
            raise ValueError(
                "seeding='record' needs the records' sample positions, but got a "
                "batch_sampler, whose batches have none; pass batch_size= (and sampler= "
                "or shuffle=) instead, or seeding='batch'"
            )

        self.dataset = dataset
        self.batch_size = None if batch_sampler is not None else batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.drop_last = drop_last
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.seed: int = seed
        self.seeding = seeding
        self._passes: tud.DataLoader[Any] | None = None
        self._endless = endless

    def _batch_chain(self, repeat: bool, num_replicas: int, rank: int) -> Any:
        if self._endless:
            if not repeat:
                raise ValueError(
                    "repeat should be True for a loader over an endless sampler (a "
                    "MixSampler), but got repeat=False: a mixture has no passes to validate "
                    "on; iterate get_data_loader(repeat=True), and validate on each dataset "
                    "with a DataLoader of its own"
                )
            repeat = False  # the mixture repeats each component itself
        if self.batch_sampler is not None:
            batches: Any = self.batch_sampler
            if repeat:
                batches = RepeatBatchSampler(batches)
            return DistributedBatchSampler(batches, num_workers=num_replicas, rank=rank)
        records: Any = (
            self.sampler if self.sampler is not None else tud.SequentialSampler(self.dataset)
        )
        if self.shuffle:
            records = ReproducibleShuffleSampler(records, self.seed)
        if repeat:
            records = RepeatSampler(records)
        records = DistributedSampler(records, num_workers=num_replicas, rank=rank)
        assert self.batch_size is not None
        return tud.BatchSampler(records, self.batch_size, self.drop_last)

    def get_data_loader(
        self,
        repeat: bool = False,
        skip: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        *,
        skip_samples: int = 0,
        loader_class: type[tud.DataLoader[Any]] | None = None,
    ) -> tud.DataLoader[Any]:
        """Build the torch DataLoader of one rank (NOTE [ loader iteration ]).

        Args:
            repeat: ``True`` for training (an endless stream with O(1) skip), ``False``
                for validation (one pass per ``iter()``).
            skip: Batches of this rank already trained, ``>= 0``; training only.
            num_replicas: The world size.
            rank: This rank, in ``[0, num_replicas)``.
            skip_samples: Samples already trained by every rank in total, ``>= 0``;
                training only, and not with a ``batch_sampler``. The first global batch
                starts at that sample whatever the batch size and world size, so a run
                may resume with another of either (NOTE [ sample positions ]); ``skip``
                batches are skipped after it.
            loader_class: The class to build, e.g. torchdata's ``StatefulDataLoader``
                (any subclass of ``torch.utils.data.DataLoader`` with its arguments). By
                default a subclass of torch's that leaves out the per-batch profiler
                annotation while no profiler runs (NOTE [ profiler annotation ]).

        Returns:
            A DataLoader over the user's dataset whose fetch seeds each batch, with
            ``state_dict()``/``load_state_dict()`` (torchdata's Stateful protocol) that
            count the batches handed to the caller, whatever ``num_workers`` and
            prefetching (NOTE [ handed batches ]); its ``batch_sampler`` saves the same
            state (position, fingerprint, divergence digest). With another
            ``loader_class`` the state is that class's (``StatefulDataLoader``'s is exact).

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: an argument is out of range, ``skip`` or ``skip_samples`` is set
                without repeat, or ``skip_samples`` with a ``batch_sampler``.
            ReproducibilityError: ``repeat=True`` over a sampler that cannot seek.

        Examples:
            >>> loader = DataLoader(range(6), batch_size=2)
            >>> [b.tolist() for b in loader.get_data_loader(num_replicas=2, rank=1)]
            [[1, 3], [5]]
        """
        repeat = check_bool("repeat", repeat)
        skip = check_int("skip", skip, minimum=0)
        num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        rank = check_int("rank", rank, minimum=0, below=num_replicas, below_name="num_replicas")
        skip_samples = check_int("skip_samples", skip_samples, minimum=0)
        for name, value in (("skip", skip), ("skip_samples", skip_samples)):
            if not repeat and value:
                raise ValueError(
                    f"{name} should be 0 when repeat=False, but got {name}={value}: "
                    "validation passes are never resumed mid-way; pass repeat=True to skip"
                )
        if skip_samples and self.batch_sampler is not None:
            raise ValueError(
                f"skip_samples should be 0 for a DataLoader built with a batch_sampler, but "
                f"got skip_samples={skip_samples}: its batches are fixed, so the stream can "
                "only resume at a whole batch; pass skip= in batches, or build the "
                "DataLoader with batch_size= instead"
            )
        if loader_class is None:
            loader_class = LeanDataLoader
        if not (isinstance(loader_class, type) and issubclass(loader_class, tud.DataLoader)):
            raise TypeError(
                "loader_class should be a subclass of torch.utils.data.DataLoader, but got "
                f"{loader_class!r}"
            )
        length = _dataset_length(self.dataset)
        if repeat and length == 0:
            raise ValueError(
                f"dataset is empty: len(dataset) is 0 for the {type(self.dataset).__name__} "
                "this DataLoader was built with, and get_data_loader(repeat=True) would "
                "repeat nothing forever; check the dataset's path or filter"
            )
        chain = self._batch_chain(repeat, num_replicas, rank)
        record_seed = self.seed if self.seeding == "record" else None
        batches = LoaderBatchSampler(
            chain,
            skip,
            skip_samples=skip_samples,
            seed=self.seed,
            dataset_length=length,
            num_replicas=num_replicas,
            rank=rank,
            record_seed=record_seed,
            epochs=epoch_aware(self.dataset),  # NOTE [ epoch-aware datasets ]
            epochs_matter=epochs_matter(self.dataset),
            data=data_fields(self.dataset),
        )
        if repeat:
            check_chain(batches)
        # Our own generator: torch draws the workers' base seed from it on every iter(),
        # which would otherwise advance the user's global torch RNG.
        workers = torch.Generator()
        workers.manual_seed(derive(self.seed, "loader-workers"))
        collate = self.collate_fn if self.collate_fn is not None else tud.default_collate
        seeded = seeded_fetch_supported()  # else a view seeds (NOTE [ seeded fetch ])
        built = loader_class(
            self.dataset if seeded else SeededView(self.dataset, record_seed),
            batch_sampler=batches,
            num_workers=self.num_workers,
            # With workers, small batches come back by value (NOTE [ inline batches ]).
            collate_fn=InlineCollate(collate) if self.num_workers > 0 else self.collate_fn,
            pin_memory=self.pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=workers,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
        )
        if seeded:  # LeanDataLoader sets it itself; another loader_class gets it here
            built._dataset_kind = seeded_kind(record_seed)
        # Frameworks see the loader as already split (NOTE [ framework hooks ]).
        view = ShardView(batches, self.dataset, num_replicas, rank, self.seed, self.shuffle)
        attach_shard_view(built, view)
        return built

    def _pass_loader(self) -> tud.DataLoader[Any]:
        if self._passes is None:
            self._passes = self.get_data_loader(repeat=False)
        return self._passes

    def __len__(self) -> int:
        return len(self._pass_loader())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._pass_loader())
