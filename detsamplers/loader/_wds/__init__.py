"""webdataset shards as an exactly resumable stream: one module per concern.

``_urls`` expands shard URLs, ``_index`` lists each shard's samples and caches the list,
``_order`` maps global positions to samples, ``_split`` deals them to ranks and workers,
``_reader`` reads samples, ``_decode`` builds the decode stage, ``_state`` checks a saved
state, ``_source`` is :class:`WebDatasetSource` and ``_loader`` is :class:`WebDataLoader`.
The public names are re-exported from :mod:`detsamplers.loader`.
"""

from ._loader import WebDataLoader
from ._source import WebDatasetSource

__all__ = ["WebDataLoader", "WebDatasetSource"]
