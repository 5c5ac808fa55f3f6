"""``order/``: the order.

Global positions to samples, a pure function of the position (shuffles, blocks, rank-local
parts), and their split across ranks and workers.

Its modules may import one another and, of ``_wds``, only ``remote/`` and ``shard/`` (never
``index/``, its peer). One module a concern:

- ``_block_shuffle``: the cross-shard block shuffle of a shard stream: one keyed permutation per
  block of shards (NOTE [ shard block shuffle ]);
- ``_fixed_part_cover``: the same parts and shards for a rank every epoch; a new order within
  each part each epoch (NOTE [ fixed part cover ]);
- ``_local_parts``: the rank-local deal of a shard stream: an epoch cut into parts, one position
  per part in turn (NOTE [ rank-local parts ]; NOTE [ part block shuffle ]);
- ``_located_batches``: locate a rank's batches a chunk at a time: one ``ShardOrder.locate``
  call per chunk (NOTE [ batches located together ]);
- ``_rank_batches``: the split of a shard stream across ranks and DataLoader workers, and its
  pass length (NOTE [ shard stream split ]);
- ``_shard_order``: the global sample order of a shard source: a pure function of the global
  position (NOTE [ shard stream order ]).
"""
