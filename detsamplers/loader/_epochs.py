"""Epoch-aware datasets: each record fetched with the pass of the stream it belongs to.

NOTE [ epoch-aware datasets ]
A dataset whose records change with the epoch (``detsamplers.tokens``' ``concat``
sequences: a new document order each epoch) cannot learn the epoch from ``set_epoch``: a
worker prefetches across an epoch's end, and a resume on another world size, batch size
or ``num_workers`` starts mid-epoch. The loader knows it exactly instead. Over a training
stream every record has a sample position ``s`` (NOTE [ sample positions ]; the batch
carries its first record's and the stride, NOTE [ per-batch seeding ]), and the link
below the shard says which pass ``s`` lies in:

- a repeat over a pass of ``N`` records: epoch ``s // N``;
- a mixture: component ``c`` at its own position ``q`` (``MixSampler.locate``), so
  component ``c``'s epoch ``q // N_c``.

A dataset opts in with one method, ``getitems_in_epochs(pairs)``: given a list of
``(epoch, index)`` pairs it returns the records, in order. The batch sampler computes the
epochs of a block of batches at once (vectorised) and attaches them to each
:class:`~detsamplers.loader._seeding.PositionedBatch`; the fetch, in whichever process
fetches, calls the method in place of ``__getitem__``, under the same seeding. Any other
dataset is untouched: no epochs are computed, nothing in its batches changes.

Where records have no sample positions the epoch is defined or refused:

- a validation pass (``repeat=False``) reads epoch 0 (``__getitem__``) every pass, so
  the same records are validated each time;
- a training stream over a user's ``batch_sampler`` is refused when the loader is built:
  its batches have no sample positions, so the epoch of a record is not known. A dataset
  whose ``epochs_matter`` is false (``chunk`` token sequences: the same records every
  epoch) is read as any dataset there instead (``__getitem__``).

A ``ConcatDataset`` or ``Subset`` around such a dataset is refused too (it would hide the
epochs and read epoch 0 forever); ``detsamplers.tokens.TokenMixture`` routes them.

A dataset may also expose ``data_config()``: a JSON-able dict of what decides its
records (a token dataset's files, mode, ``seq_len``, seed). The loader's state keeps it
under ``state["loader"]["data"]``, each value longer than :data:`INLINE_CHARS` characters
as a digest (the state stays small), and ``load_state_dict`` refuses a state whose fields
differ, naming each; a state saved without it still loads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from .._node import Node

__all__ = [
    "INLINE_CHARS",
    "data_differences",
    "data_fields",
    "epoch_aware",
    "epochs_matter",
    "record_epochs",
    "stream_epochs",
]

I64 = npt.NDArray[np.int64]

#: A ``data_config()`` value whose JSON is longer than this is kept as a digest.
INLINE_CHARS = 64


def epoch_aware(dataset: Any) -> bool:
    """Whether ``dataset`` reads ``(epoch, index)`` pairs (NOTE [ epoch-aware datasets ]).

    Examples:
        >>> epoch_aware(range(3))
        False
    """
    return callable(getattr(dataset, "getitems_in_epochs", None))


def epochs_matter(dataset: Any) -> bool:
    """Whether an epoch-aware dataset's records change with the epoch (its ``epochs_matter``).

    Examples:
        >>> class Same:
        ...     epochs_matter = False
        ...     def getitems_in_epochs(self, pairs): return [index for _, index in pairs]
        >>> epochs_matter(Same()), epochs_matter(range(3))
        (False, True)
    """
    return bool(getattr(dataset, "epochs_matter", True))


def stream_epochs(node: Node) -> bool:
    """Whether the epochs of the sample stream ``node`` can be computed."""
    return node.verb in ("repeat", "mix")


def record_epochs(node: Node, samples: I64) -> I64:
    """The epoch of the record at each sample position of the stream ``node``.

    Examples:
        >>> import numpy as np
        >>> from detsamplers import RepeatSampler
        >>> record_epochs(RepeatSampler(range(3)), np.array([0, 2, 3, 7])).tolist()
        [0, 0, 1, 2]
    """
    if node.verb == "mix":
        component, position = node.locate(samples)  # type: ignore[attr-defined]
        lengths = np.maximum(np.asarray(node.lengths, dtype=np.int64), 1)  # type: ignore[attr-defined]
        out: I64 = position // lengths[component]
        return out
    inner = node.inner_node()
    assert node.verb == "repeat" and inner is not None
    return samples // max(inner.pass_length, 1)


def data_fields(dataset: Any) -> dict[str, Any] | None:
    """``dataset.data_config()`` as the state keeps it, or None without the hook.

    Examples:
        >>> class Data:
        ...     def data_config(self): return {"seq_len": 4, "files": ["a" * 80]}
        >>> fields = data_fields(Data())
        >>> fields["seq_len"], fields["files"][:8]
        (4, 'blake2b:')
    """
    hook = getattr(dataset, "data_config", None)
    if not callable(hook):
        return None
    config = hook()
    if not isinstance(config, Mapping):
        raise TypeError(
            "dataset.data_config() should return a dict of the dataset's fields, but got "
            f"{type(config).__name__}; return a JSON-able dict"
        )
    out: dict[str, Any] = {}
    for key, value in config.items():
        text = json.dumps(value, sort_keys=True)
        if len(text) > INLINE_CHARS:
            value = "blake2b:" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        out[str(key)] = value
    return out


def data_differences(saved: Any, here: dict[str, Any] | None) -> list[str]:
    """The fields of a saved ``data`` entry that differ from this dataset's, each named."""
    if not isinstance(saved, Mapping) or here is None:
        return []
    return [
        f"{key} is {saved.get(key)!r} in the state but {here.get(key)!r} here"
        for key in sorted(set(saved) | set(here))
        if saved.get(key) != here.get(key)
    ]
