"""``read/``: the readers and the node cache.

The readers of local and remote shards, the first blocks of a batch fetched at once, and the
node-local cache of whole remote shards.

Its modules may import one another and, of ``_wds``, only ``order/``, ``index/``, ``remote/``
and ``shard/``. One module a concern:

- ``_block_reader``: ``ShardReaders``: several shards open at once, for reads that jump among a
  block's shards;
- ``_cache_reader``: ``CachedReader``: read samples from the node's shard cache, prefetching the
  shards to come (NOTE [ shard prefetch ]; NOTE [ cached reads ]);
- ``_first_blocks``: a batch's first blocks of its remote shards, fetched at once (NOTE [ first
  blocks of a batch ]);
- ``_node_cache``: ``ShardCache``: a node-local folder of whole remote shards, shared by every
  process of a node (NOTE [ shard cache ]);
- ``_node_fetches``: ``node_fetches``: which byte ranges of which shards a node fetches, the
  one decision the reader and a plan share (NOTE [ node fetches ]);
- ``_sample_reader``: ``SampleReader``: the one protocol of every reader, which the source names
  (NOTE [ sample readers ]);
- ``_sample_span``: a sample cut out of a span of its shard's bytes, and the span's tar headers
  verified, for every reader (NOTE [ one way to read a sample ]);
- ``_shard_reader``: ``ShardReader``: read indexed samples from local or remote shards, one open
  shard at a time.
"""
