"""``index/``: the indexes.

Where each sample of a shard lies: listed by one scan, kept in index files (one per shard, one
per folder), and written with the shards.

Its modules may import one another and, of ``_wds``, only ``remote/`` and ``shard/`` (never
``order/``, its peer). One module a concern:

- ``_index_shards``: shard indexes: where each sample of an uncompressed tar shard lies, cached
  on disk (NOTE [ shard index ]);
- ``_remote_index``: indexes of remote shards: read next to the shard, or built by one scan and
  cached;
- ``_scan_shard``: scanning a shard: list a tar's members and group them into samples as
  webdataset does;
- ``_set_index_file``: the set-level index file: every shard of a folder in one file, read with
  one request (NOTE [ set index ]);
- ``_shard_index_file``: the index file of a shard: ``<shard>.index.npz``, compact and quick to
  decode (NOTE [ index file format ]);
- ``_shard_writer``: a shard writer that writes each shard's index file as it writes the tar
  (NOTE [ writing shards with their index ]).
"""
