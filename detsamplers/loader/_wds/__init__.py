"""webdataset shards as an exactly resumable stream: one module per concern.

``_urls`` expands shard URLs and tells local from remote ones; ``_fetch`` reads byte
ranges of remote shards with timeouts and retries (NOTE [ remote reads ]) and ``_ranges``
checks that their servers honour Range requests (NOTE [ range support ]); ``_index``
lists each shard's samples and caches the list (NOTE [ shard index ]), ``_remote_index``
does so for remote shards and ``_index_file`` is the format of their index files (NOTE
[ index file format ]); ``_order`` maps global positions to samples (NOTE [ shard stream
order ]), ``_split`` deals them to ranks and workers (NOTE [ shard stream split ]);
``_reader`` reads samples from local and remote shards side by side; ``_decode`` builds the
decode stage, ``_state`` checks a saved state; ``_source`` is :class:`WebDatasetSource`
and ``_loader`` is :class:`WebDataLoader`; ``_mix_order`` maps positions of a mixture of
shard sets to samples (NOTE [ shard stream mixture ]), ``_mix_lanes`` does so by lanes with
rank-local parts (NOTE [ mixture lanes ]), ``_mix_args``, ``_mix_reader`` and ``_mix_state``
check a mixture's own arguments, read its sets and check its state, and ``_mix`` is
:class:`WebDatasetMix`; ``_writer`` is :class:`ShardWriter`, which writes shards with their
index files (NOTE [ writing shards with their index ]). The public names are re-exported
from :mod:`detsamplers.loader`.
"""

from ._loader import WebDataLoader
from ._mix import WebDatasetMix
from ._source import WebDatasetSource

# ShardWriter (``_writer``) imports webdataset, an optional extra: detsamplers.loader
# imports it on first use.
__all__ = ["WebDataLoader", "WebDatasetMix", "WebDatasetSource"]
