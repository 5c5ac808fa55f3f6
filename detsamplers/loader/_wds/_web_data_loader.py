"""``WebDataLoader``: torch's DataLoader over a ``WebDatasetSource``, tracking its position.

NOTE [ workers stop with the error ]
When a worker's read raises, torch re-raises the error in the main process from
``ExceptionWrapper.reraise``, whose frame holds the exception, whose traceback holds that
frame: a reference cycle that also holds torch's multi-process iterator (``self`` of the
frames between). So the iterator is freed by the cyclic garbage collector, not when the
loop ends, and the collector calls weak-reference callbacks before ``__del__``: the
index queues' own finalizers first close their feeder threads, then the iterator's
``__del__`` puts the ``None`` that tells each worker to stop into a queue that no thread
sends any more. Each worker waits for it until torch's join gives up (5 s) and
terminates it: every failed job hung 5 s at its error, and a preempted one lost 5 s of
its grace period. So ``__iter__`` shuts the workers down itself, in a ``finally``, while
the iterator and its queues are whole: on an error, on ``break`` (the generator closed)
and at the end. A worker mid-read finishes that read (bounded by the source's
``timeout``) and exits; the node cache's atomic renames and locks see a normal exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.utils.data as tud

from ..._errors import check_int
from ..._seeds import derive
from .._inline import InlineCollate
from ._webdataset_source import WebDatasetSource

__all__ = ["WebDataLoader"]


def _identity(batch: Any) -> Any:
    return batch


def _stop_workers(iterator: object) -> None:
    """Stop torch's workers of ``iterator`` now (NOTE [ workers stop with the error ])."""
    stop = getattr(iterator, "_shutdown_workers", None)  # torch's multi-process iterator
    if stop is not None:
        stop()


class WebDataLoader(tud.DataLoader[Any]):
    """A torch DataLoader over a :class:`WebDatasetSource`, with its resume state.

    It is ``torch.utils.data.DataLoader(source, batch_size=None, ...)``: the source already
    yields batches, and each worker builds every ``num_workers``-th one (NOTE [ shard
    stream split ]). Iterating it advances ``source.position`` in the main process as
    batches are handed out, so :meth:`state_dict` is exact whatever ``num_workers`` and
    prefetching; :meth:`load_state_dict` makes the next ``iter()`` resume there.

    Args:
        source: The source to load from.
        num_workers: Worker processes, ``>= 0``.
        pin_memory: Passed to torch's DataLoader.
        timeout: Passed to torch's DataLoader.
        worker_init_fn: Passed to torch's DataLoader.
        multiprocessing_context: Passed to torch's DataLoader.
        prefetch_factor: Passed to torch's DataLoader.

    ``persistent_workers`` is not offered: workers that outlive an ``iter()`` would miss
    a state loaded in between. The workers' base seed comes from a generator keyed by the
    source's seed, so ``iter()`` never draws from the global torch RNG (torch's default
    would, and a resumed training loop would then see other dropout draws).

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
        ...     for i in range(6):
        ...         w.write({"__key__": f"k{i}", "cls": str(i).encode()})
        >>> source = WebDatasetSource(os.path.join(folder, "s-0.tar"), seed=0, batch_size=2,
        ...     decode=(), map=lambda s: s["cls"], shuffle_shards=False)
        >>> loader = WebDataLoader(source)
        >>> it = iter(loader); next(it).tolist(), next(it).tolist()
        ([0, 1], [2, 3])
        >>> state = loader.state_dict(); state["position"]
        4
        >>> loader.load_state_dict(state); next(iter(loader)).tolist()
        [4, 5]
    """

    def __init__(
        self,
        source: WebDatasetSource,
        num_workers: int = 0,
        *,
        pin_memory: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        prefetch_factor: int | None = None,
    ) -> None:
        if not isinstance(source, WebDatasetSource):
            raise TypeError(
                "source should be a WebDatasetSource, but got source of type "
                f"{type(source).__name__}"
            )
        num_workers = check_int("num_workers", num_workers, minimum=0)
        workers = torch.Generator()
        workers.manual_seed(derive(source.seed, "loader-workers"))
        super().__init__(
            source,
            batch_size=None,
            num_workers=num_workers,
            # With workers, small batches come back by value (NOTE [ inline batches ]).
            collate_fn=InlineCollate(_identity) if num_workers > 0 else _identity,
            pin_memory=pin_memory,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            prefetch_factor=prefetch_factor,
            generator=workers,
        )
        self.source = source

    # torch types __iter__ as returning its iterator class; a generator is what we need here.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """Yield the source's batches, advancing ``source.position`` as each is handed out."""
        source = self.source
        batch = source._begin()
        iterator = super().__iter__()
        try:
            for item in iterator:
                batch += 1
                source.position = source.origin + batch * source.global_batch
                yield item
        finally:
            _stop_workers(iterator)

    def state_dict(self) -> dict[str, Any]:
        """The source's state after the last batch handed out (see its ``state_dict``)."""
        return self.source.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume the next ``iter()`` at ``state_dict`` (see the source's ``load_state_dict``)."""
        self.source.load_state_dict(state_dict)
