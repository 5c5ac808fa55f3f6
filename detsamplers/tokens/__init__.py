"""detsamplers.tokens: pretokenized corpora as sequences of ``L`` tokens that resume exactly.

``TokenCorpus`` opens token files (``.npy``, raw ``.bin``) as one stream of documents
(``_files``: NOTE [ token files ]; ``_boundaries``: NOTE [ document boundaries ];
``_corpus``: NOTE [ token corpus ]). ``TokenSequences`` cuts it into sequences by
``mode`` (``_sequences``: NOTE [ token sequences ]; ``_concat``:
NOTE [ block-hierarchical concat ]; ``_pack``: NOTE [ packed sequences ]), each a dict
of what a model consumes, and
``collate_tokens`` batches them (``_features``: NOTE [ sequence features ]);
``TokenWriter`` writes a corpus folder (``_writer``: NOTE [ token writer ]). The dataset
is map-style: ``detsamplers.loader.DataLoader`` shuffles, shards, batches and resumes it,
and hands each record its epoch (NOTE [ epoch-aware datasets ]). ``TokenMixture`` mixes
several (``_mixture``: NOTE [ token mixture ]).
Files named by ``http(s)://`` or ``s3://`` URLs are read through the webdataset source's
remote layer and node cache (``_remote``: NOTE [ remote token files ]), imported only then.
Modules import down: ``_files`` < ``_boundaries`` < ``_corpus`` < ``_concat`` <
``_pack`` < ``_sequences`` < ``_mixture``; ``_writer`` sits on ``_corpus``; ``_features``
stands alone.
Megatron's ``.bin``/``.idx`` pairs are read by ``_megatron`` (NOTE [ megatron files ]),
which imports ``_files`` and is imported by ``_corpus``.

Examples:
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> from detsamplers.loader import DataLoader
    >>> from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens
    >>> path = Path(tempfile.mkdtemp()) / "train.bin"
    >>> np.arange(1, 41, dtype=np.uint16).tofile(path)
    >>> corpus = TokenCorpus(path, dtype="uint16", eod_id=10)
    >>> sequences = TokenSequences(corpus, seq_len=4, mode="concat", seed=1)
    >>> loader = DataLoader(sequences, batch_size=2, shuffle=True, seed=1,
    ...                     collate_fn=collate_tokens)
    >>> batch = next(iter(loader.get_data_loader(repeat=True)))
    >>> batch["input_ids"].shape, batch["cu_seqlens"].shape
    (torch.Size([2, 4]), torch.Size([9]))
"""

from ._corpus import TokenCorpus
from ._features import collate_tokens
from ._mixture import TokenMixture
from ._sequences import TokenSequences
from ._writer import TokenWriter

__all__ = ["TokenCorpus", "TokenMixture", "TokenSequences", "TokenWriter", "collate_tokens"]
