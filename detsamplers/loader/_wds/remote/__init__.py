"""``remote/``: remote I/O.

Shard URLs, byte ranges through fsspec or obstore with timeouts and retries, range support,
object-store versions, and fork safety.

Its modules may import one another and, of ``_wds``, only ``shard/``. One module a concern:

- ``_after_fork``: a forked DataLoader worker must not unregister its parent's sockets from the
  parent's epoll (NOTE [ fsspec loop after fork ]);
- ``_object_store``: object storage (S3, GCS): the version a shard was indexed at, pinned on
  every read (NOTE [ object storage ]);
- ``_obstore_s3``: S3 reads without botocore: through obstore, when it is installed and the
  options allow (NOTE [ S3 reads through obstore ]);
- ``_range_support``: a server that ignores Range requests is reported when a remote source is
  built (NOTE [ range support ]);
- ``_remote_reads``: remote shards: byte ranges through fsspec, with timeouts, retries and a
  read-ahead (NOTE [ remote reads ]);
- ``_urls``: shard URLs: brace patterns expanded as webdataset expands them; local or remote.
"""
