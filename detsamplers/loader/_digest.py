"""A divergence digest of a batch stream, computed in O(batch) at any position.

NOTE [ divergence digest ]
A chain's stream is a pure function of its configuration and the position, so a digest
of "the stream up to position p" needs no history: it hashes the chain's fingerprint,
the loader's own fields (seed, dataset length, ranks), ``p`` itself, and the batches at
two probe positions computed by random access, the first batch (position 0) and the last
one consumed (``p - 1``). Saving and checking it costs two batch lookups, never a replay.
A state whose digest differs from the one recomputed for its claimed position was saved
from another stream: a changed configuration shows up in the named fields, and a changed
sampler content or shuffle algorithm under an unchanged configuration shows up in the
probed batches. A chain that cannot be addressed (a foreign sampler, validation only) is
digested without probes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from .._source import Node, chain_of

__all__ = ["probe_positions", "sample_digest", "sample_probes", "stream_digest"]


def probe_positions(position: int) -> list[int]:
    """The positions whose batches go into the digest at ``position``.

    Examples:
        >>> probe_positions(0), probe_positions(1), probe_positions(5)
        ([], [0], [0, 4])
    """
    return sorted({0, position - 1}) if position > 0 else []


def stream_digest(
    node: Node,
    position: int,
    fingerprint: str,
    fields: dict[str, Any],
    known: dict[int, list[int]] | None = None,
) -> str:
    """A 16-hex-digit digest of ``node``'s batch stream up to ``position``.

    Args:
        node: The outermost stage of a batch chain.
        position: The stream position the digest is for.
        fingerprint: The chain's fingerprint (from its ``state_dict``).
        fields: The loader's JSON-able fields (seed, dataset length, ranks).
        known: Batches already in hand, by position (the one just yielded, the first):
            they are used instead of being looked up again. They must be the chain's own.

    Examples:
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatSampler, SkipBatchSampler
        >>> chain = SkipBatchSampler(BatchSampler(RepeatSampler(range(5)), 2, False), 0)
        >>> stream_digest(chain, 3, "f", {}) == stream_digest(chain, 3, "f", {})
        True
        >>> stream_digest(chain, 3, "f", {}) == stream_digest(chain, 2, "f", {})
        False
    """
    probes: list[list[int]] = []
    source = chain_of(node)[-1]
    if node.indexable and source.pass_length > 0 and position > 0:
        wanted = probe_positions(position)
        known = known or {}
        missing = [p for p in wanted if p not in known]
        if missing:
            looked_up = node.batches(np.asarray(missing, dtype=np.int64))
            known = {**known, **dict(zip(missing, looked_up, strict=True))}
        probes = [[int(i) for i in known[p]] for p in wanted]
    text = json.dumps([fingerprint, fields, position, probes], sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def sample_probes(samples: int, global_batch: int, rank: int) -> list[int]:
    """The samples whose records go into a sample digest at ``samples``.

    Sample 0, and the first record of the saving rank's last batch, ``samples - G + r``:
    the batch just yielded, so saving a state costs no lookup.

    Examples:
        >>> sample_probes(0, 4, 1), sample_probes(12, 4, 1), sample_probes(2, 4, 1)
        ([], [0, 9], [0])
    """
    if samples <= 0:
        return []
    return sorted({0, max(0, samples - global_batch + rank)})


def sample_digest(
    samples_node: Node,
    samples: int,
    stream_fingerprint: str,
    fields: dict[str, Any],
    probes: list[int],
    known: dict[int, int] | None = None,
) -> str:
    """A world-size-free digest of the sample stream up to sample ``samples``.

    It hashes the fingerprint of the links that define the sample stream, the loader's
    fields that every rank and every batch size share (seed, dataset length), ``samples``
    and the records at the ``probes`` (:func:`sample_probes`, NOTE [ sample positions ]),
    so a state saved with one batch size and world size can be checked by a loader with
    others: it recomputes the probes from the saved chain's batch size, world size and rank.

    Args:
        samples_node: The sample stream (the record node under the shard).
        samples: The samples consumed.
        stream_fingerprint: The fingerprint of the stream's links.
        fields: JSON-able fields shared by every rank.
        probes: The sample positions to probe.
        known: Records already in hand, by sample position.

    Examples:
        >>> from detsamplers import RepeatSampler
        >>> stream = RepeatSampler(range(5))
        >>> a = sample_digest(stream, 7, "f", {}, [0, 6])
        >>> a == sample_digest(stream, 7, "f", {}, [0, 6], known={6: 1})
        True
        >>> a == sample_digest(stream, 6, "f", {}, [0, 5])
        False
    """
    known = known or {}
    missing = [p for p in probes if p not in known]
    if missing:
        looked_up = samples_node.records(np.asarray(missing, dtype=np.int64)).tolist()
        known = {**known, **dict(zip(missing, looked_up, strict=True))}
    records = [[p, int(known[p])] for p in probes]
    text = json.dumps([stream_fingerprint, fields, samples, records], sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
