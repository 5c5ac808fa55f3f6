"""webdataset shards as an exactly resumable stream, in sub-packages by concern.

The front door is this folder: :class:`WebDatasetSource` and :class:`WebDataLoader`, with the
decode stage, the resume state and the parts law of a source. Beneath it, each sub-package
maps its own modules and NOTEs in its ``__init__`` docstring; a module imports only from its
own layer or the ones below (``tests/test_architecture.py`` checks it), the mixture above
all (``WebDatasetMix`` is a ``WebDatasetSource``):

1. ``mix/`` (the mixture);
2. the source, its loader, decoding, state and parts law (this folder);
3. ``read/`` (the readers and the node cache);
4. ``order/`` (the order) and ``index/`` (the indexes);
5. ``remote/`` (remote I/O);
6. ``shard/`` (one shard's record, members, tar headers and file checks).

The sub-packages' names are plain: the package they live in, ``_wds``, is already private,
and every module in them keeps its leading underscore. The public names are re-exported from
:mod:`detsamplers.loader`.
"""

from ._plan import plan_run
from ._plan_inputs import Network, SyntheticShards
from ._plan_report import RunPlan
from ._web_data_loader import WebDataLoader
from ._webdataset_source import WebDatasetSource
from .mix._plan_mixture import plan_mixture
from .mix._webdataset_mix import WebDatasetMix

# ShardWriter (``_shard_writer``) imports webdataset, an optional extra: detsamplers.loader
# imports it on first use.
__all__ = [
    "Network",
    "RunPlan",
    "SyntheticShards",
    "WebDataLoader",
    "WebDatasetMix",
    "WebDatasetSource",
    "plan_mixture",
    "plan_run",
]
