"""litdata's ``TokensLoader`` over chunks written by ``litdata.optimize``.

As its README shows for pretraining: ``optimize(fn, inputs, output_dir,
chunk_size=(L + 1) * 8012, item_loader=TokensLoader())`` with ``fn`` yielding token
tensors (here uint16, a block of documents each, EOS-terminated, in storage order), then
``StreamingDataset(dir, item_loader=TokensLoader(block_size=L + 1), shuffle=True,
seed=0)`` and ``StreamingDataLoader(batch_size=B, num_workers=w)``: a batch is one
``(B, L + 1)`` tensor of the chunks' dtype. Mode ``user`` adds what litgpt's
``pretrain.py`` does to each batch, ``x[:, 0:L].contiguous().long()`` and
``x[:, 1:L + 1].contiguous().long()`` (no mask at document ends): the work of our
``chunk-io`` column. Sequences are cut
inside each chunk (a chunk's tail shorter than ``L + 1`` is dropped); a resume loads the
loader's ``state_dict()`` (samples yielded, epoch, the chunk list) and re-derives the
chunk order.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import Corpus

NAME = "litdata"
DISTRIBUTION = "litdata"
#: Imported before any timing.
IMPORTS = ("litdata",)


def _block(item: tuple[str, int, int]) -> Any:
    import torch

    path, first, last = item
    tokens = np.fromfile(path, dtype=np.uint16, count=last - first, offset=2 * first)
    yield torch.from_numpy(tokens)


def write(corpus: Corpus, seq_len: int, ends: np.ndarray, per_block: int = 65536) -> None:
    """``litdata.optimize`` of the ``.bin``, a block of ``per_block`` documents per item."""
    from litdata import TokensLoader, optimize

    cuts = [0, *ends[per_block - 1 :: per_block].tolist()]
    if cuts[-1] != int(ends[-1]):
        cuts.append(int(ends[-1]))
    inputs = [(str(corpus.bin), a, b) for a, b in itertools.pairwise(cuts)]
    optimize(fn=_block, inputs=inputs, output_dir=str(corpus.litdata),
             chunk_size=(seq_len + 1) * 8012, item_loader=TokensLoader(), num_workers=2,
             verbose=False)  # fmt: skip


def _loader(corpus: Corpus, seq_len: int, batch: int, num_workers: int) -> Any:
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    items = TokensLoader(block_size=seq_len + 1)
    dataset = StreamingDataset(str(corpus.litdata), item_loader=items, shuffle=True, seed=0)
    return StreamingDataLoader(dataset, batch_size=batch, num_workers=num_workers)


def _state(corpus: Corpus, seq_len: int, batch: int, samples: int) -> dict[str, Any]:
    """The loader's state after one batch, moved to ``samples`` samples (epoch, in-epoch).

    litdata's state counts samples yielded in the current epoch, the epoch, and lists the
    chunks; those are the fields set here, as an iteration to ``samples`` would set them.
    """
    loader = _loader(corpus, seq_len, batch, 0)
    next(iter(loader))
    state: dict[str, Any] = loader.state_dict()
    per_epoch = len(loader.dataset) // batch * batch
    epoch, within = 1 + samples // per_epoch, samples % per_epoch
    state["current_epoch"] = state["dataset"]["current_epoch"] = epoch
    state["num_samples_yielded"] = state["dataset"]["num_samples_yielded"] = within
    state["dataset"]["sample_in_epoch"] = within
    return state


def resume(corpus: Corpus, seq_len: int, batch: int, samples: int) -> Callable[[], Any]:
    """Build the loader, load the state, take the first batch."""
    saved = json.loads(json.dumps(_state(corpus, seq_len, batch, samples)))

    def first() -> Any:
        loader = _loader(corpus, seq_len, batch, 0)
        loader.load_state_dict(saved)
        return next(iter(loader))

    return first


def loader(
    corpus: Corpus, seq_len: int, batch: int, num_workers: int, mode: str = ""
) -> Iterator[Any]:
    """Epoch 1 from its start; ``mode="user"``: each batch as litgpt's pretraining loop
    turns it into inputs and targets (two int64 ``(B, L)`` tensors, ours' equal work)."""
    batches: Iterator[Any] = iter(_loader(corpus, seq_len, batch, num_workers))
    if mode != "user":
        return batches
    return ((x[:, 0:seq_len].contiguous().long(), x[:, 1 : seq_len + 1].contiguous().long())
            for x in batches)  # fmt: skip


def state(corpus: Corpus, seq_len: int, batch: int, samples: int) -> bytes:
    """``StreamingDataLoader.state_dict()`` as JSON."""
    return json.dumps(_state(corpus, seq_len, batch, samples)).encode()
