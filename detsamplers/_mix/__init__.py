"""Mix: an endless stream that interleaves several chains with weights.

The package reads as the mixture's pipeline, each file opening with the NOTE it implements:

- ``_law.py``: NOTE [ mixture law ]; the weights checked into a plan of segments, each with
  its window and counts;
- ``_segment.py``: one segment's keyed arrangements of its window, its tables and bases;
- ``_kernel.py``: the glue to the compiled kernel (NOTE [ compiled mixture kernel ]);
- ``_components.py``: which samplers a mixture may mix;
- ``_sampler.py``: ``MixSampler``, positions to records;
- ``_adopt.py``: NOTE [ adding a component ]; what a resume may change (a later curriculum,
  appended or grown components), the mixture's hooks of NOTE [ state hooks ].
"""

from ._adopt import adopt_curriculum, adopt_mixture_growth, mix_position
from ._kernel import (
    KERNEL_MAX_COMPONENTS,
    KERNEL_MAX_WINDOW,
    KERNEL_MIN_POSITIONS,
    KERNEL_PARAMS,
    _kernel_params,
)
from ._law import DEFAULT_WINDOW, MAX_AUTO_WINDOW, MAX_COMPONENTS, MAX_WINDOW
from ._sampler import MixSampler
from ._segment import _Segment

__all__ = [
    "DEFAULT_WINDOW",
    "KERNEL_MAX_COMPONENTS",
    "KERNEL_MAX_WINDOW",
    "KERNEL_MIN_POSITIONS",
    "KERNEL_PARAMS",
    "MAX_AUTO_WINDOW",
    "MAX_COMPONENTS",
    "MAX_WINDOW",
    "MixSampler",
    "_Segment",
    "_kernel_params",
    "adopt_curriculum",
    "adopt_mixture_growth",
    "mix_position",
]
