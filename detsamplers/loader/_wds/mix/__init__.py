"""``mix/``: the mixture.

A mixture of shard sets (``WebDatasetMix``): a ``WebDatasetSource`` over the sets' shards whose
order is the mixture law, with its own arguments, readers and state.

Its modules may import one another and, of ``_wds``, only the front door (``_wds/_*.py``),
``read/``, ``order/``, ``index/``, ``remote/`` and ``shard/``. One module a concern:

- ``_mixture_fetches``: which byte ranges of each set's shards a node fetches into its cache,
  the one decision the mixture's reader and its plan share (NOTE [ mixture fetches ]);
- ``_mixture_lanes``: the order of a mixture of shard sets with rank-local parts: one mixture
  law per lane (NOTE [ mixture lanes ]);
- ``_mixture_order``: the global sample order of a mixture of shard sets: the mixture law over
  shard streams (NOTE [ shard stream mixture ]);
- ``_mixture_state``: the resume state of a mixture of shard sets, and the checks made when it
  is loaded (NOTE [ mixture state ]);
- ``_plan_mixture``: ``plan_mixture``: what a mixture's run downloads per node and pass, with a
  batch-size schedule, from the mixture's own order and fetch decisions (NOTE [ mixture plan ]);
- ``_plan_mixture_sets``: a mixture's plan over set indexes: the sets from local set index
  files, and each rank's fetch of them (NOTE [ mixture plan set index ]);
- ``_plan_mixture_synthetic``: a mixture's plan from synthetic shard sets, and each node's first
  batch (NOTE [ synthetic mixture plan ]);
- ``_per_set_args``: the arguments of a mixture of shard sets that are particular to it, checked
  (NOTE [ per-set arguments ]);
- ``_set_readers``: one reader per shard set of a mixture, so that each set's reads stay
  sequential (NOTE [ mixture readers ]);
- ``_webdataset_mix``: ``WebDatasetMix``: several webdataset shard sets mixed with weights,
  exactly resumable (NOTE [ shard set mixture ]).
"""
