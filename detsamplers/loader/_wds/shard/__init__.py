"""``shard/``: one shard's record, members, tar headers and file checks.

What every layer above reads: the record of a shard (``ShardInfo``), its packed members, its tar
headers, and the checks its files pass before they are trusted.

Its modules may import one another and nothing else of ``_wds``. One module a concern:

- ``_file_checks``: index and shard files that cannot lie: what is checked before either is
  trusted (NOTE [ index verification ]);
- ``_packed_members``: a shard's members, packed: five flat lists, one sample's lists built when
  it is asked for;
- ``_small_fields``: a sample's small fields in one tar member: the packed format, written and
  split back (NOTE [ packed small fields ]);
- ``_shard_info``: what an index holds for one shard (``ShardInfo``), and the fallback folder of
  index files;
- ``_tar_check``: the tar header check on read (NOTE [ index verification ], in
  :mod:`._file_checks`);
- ``_tar_walk``: the tar header walks of the shard scan: every member's name, data offset and
  size (NOTE [ tar header walk ]).
"""
