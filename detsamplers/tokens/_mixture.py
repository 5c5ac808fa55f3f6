"""``TokenMixture``: token sequences of several corpora mixed with weights, counted in sequences.

NOTE [ token mixture ]
A mixture of corpora is ``MixSampler``'s law (NOTE [ mixture law ]) over sequences: the
mixture position ``p`` is component ``c`` at its own position ``q``, and component ``c``'s
record there is its shuffle's sequence at pass ``q // N_c``. ``TokenMixture`` is the
``ConcatDataset`` of the components plus that sampler, with two things a plain
``ConcatDataset`` lacks: it reads each record at its component's epoch (it routes the
loader's ``(epoch, index)`` pairs, NOTE [ epoch-aware datasets ], to the component that
holds ``index``, so a ``concat`` component gets a new document order per pass of its
own), and its ``data_config()`` names every component's corpus, mode, ``L`` and seed, so
the loader's state refuses another mixture's. The state stays the loader's few integers:
the weights, window and curriculum are in the chain's fingerprint; nothing grows with
the corpora or the position.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy.typing as npt
import torch.utils.data as tud

from .._mix import MixSampler
from ._sequences import TokenSequences

__all__ = ["TokenMixture"]


class TokenMixture(tud.ConcatDataset[dict[str, npt.NDArray[Any]]]):
    """Several :class:`TokenSequences` mixed with weights (and a curriculum), in sequences.

    Pass it as the DataLoader's dataset and its :attr:`sampler` as the sampler. Each
    component is shuffled with its own seed hashed from ``seed``
    (``MixSampler.from_datasets``), and each record is read at its component's epoch.

    Args:
        sequences: The components, one :class:`TokenSequences` each.
        weights: One non-negative weight per component (``MixSampler``'s ``weights``).
        seed: Keys the interleaving and the components' shuffles.
        window: ``MixSampler``'s ``window``.
        curriculum: ``MixSampler``'s ``curriculum``: ``(start, weights)`` pairs, ``start``
            in mixture positions (sequences of every rank).

    Raises:
        TypeError: ``sequences`` is not a list of :class:`TokenSequences`.
        ValueError: the components' ``seq_len`` differ; or as ``MixSampler`` (weights,
            window, curriculum).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.loader import DataLoader
        >>> from detsamplers.tokens import TokenCorpus, TokenMixture, TokenSequences
        >>> folder = Path(tempfile.mkdtemp())
        >>> np.arange(1, 41, dtype=np.uint16).tofile(folder / "web.bin")
        >>> np.arange(1, 21, dtype=np.uint16).tofile(folder / "code.bin")
        >>> web = TokenSequences(TokenCorpus(folder / "web.bin", dtype="uint16", eod_id=10),
        ...                      4, mode="concat", seed=1)
        >>> code = TokenSequences(TokenCorpus(folder / "code.bin", dtype="uint16", eod_id=5),
        ...                       4, mode="concat", seed=2)
        >>> mixture = TokenMixture([web, code], weights=[0.75, 0.25], seed=0)
        >>> len(mixture), mixture.sampler.counts
        (12, [3, 1])
        >>> loader = DataLoader(mixture, sampler=mixture.sampler, batch_size=4, seed=0)
        >>> next(iter(loader.get_data_loader(repeat=True)))["input_ids"].shape
        torch.Size([4, 4])
    """

    def __init__(
        self,
        sequences: Sequence[TokenSequences],
        weights: Sequence[float],
        seed: int,
        *,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> None:
        if not isinstance(sequences, (list, tuple)) or not all(
            isinstance(s, TokenSequences) for s in sequences
        ):
            got = (
                type(sequences).__name__
                if not isinstance(sequences, (list, tuple))
                else [type(s).__name__ for s in sequences]
            )
            raise TypeError(
                f"sequences should be a list of TokenSequences, one per corpus, but got {got}"
            )
        for i, part in enumerate(sequences[1:], 1):
            if part.seq_len != sequences[0].seq_len:
                raise ValueError(
                    f"sequences should share one seq_len (a batch has one shape), but "
                    f"sequences[{i}] has seq_len={part.seq_len} but sequences[0] "
                    f"{sequences[0].seq_len}; build every component with the same seq_len"
                )
        super().__init__(sequences)
        self.sequences: list[TokenSequences] = list(sequences)
        #: The mixture's sampler: pass it as the DataLoader's ``sampler``.
        self.sampler = MixSampler.from_datasets(
            self.sequences, weights, seed, window=window, curriculum=curriculum
        )

    def getitems_in_epochs(
        self, pairs: Sequence[tuple[int, int]]
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """Each ``(epoch, index)``'s sequence, read from its component at that epoch.

        The pairs are grouped by component and each group is read by the component's
        batch path (:meth:`TokenSequences.getitems_in_epochs`); the records come back in
        the order of ``pairs``, the same arrays as one :meth:`TokenSequences.at` each.
        """
        groups: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
        for row, (epoch, index) in enumerate(pairs):
            c = bisect_right(self.cumulative_sizes, index)
            local = index - (self.cumulative_sizes[c - 1] if c else 0)
            rows, wanted = groups.setdefault(c, ([], []))
            rows.append(row)
            wanted.append((epoch, local))
        out: list[dict[str, npt.NDArray[Any]]] = [{} for _ in pairs]
        for c, (rows, wanted) in groups.items():
            for row, record in zip(rows, self.sequences[c].getitems_in_epochs(wanted), strict=True):
                out[row] = record
        return out

    def data_config(self) -> dict[str, Any]:
        """Every component's fields (NOTE [ epoch-aware datasets ])."""
        return {"components": [s.config() for s in self.sequences]}
