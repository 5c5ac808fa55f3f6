"""The optional compiled kernel of the mixture (``detsamplers._kernel``).

NOTE [ compiled mixture kernel ]
A rank's block of a mixture costs, in numpy, about a hundred array passes: a SplitMix64 key
per window, two table gathers per position, a grouping by component and one Feistel network
(about forty passes) per component and pass. On blocks of a few thousand positions per
component the calls' fixed cost dominates, and the mixture ran at about 0.6 times the plain
chain's speed at 8 and 64 ranks. ``_kernel.c`` runs the same arithmetic on the same word
sizes in one loop per position, without the GIL; its outputs are bit-identical to the
numpy code's, which stays as the fallback and the reference (tests/test_mix_kernel.py
compares the two on random mixtures, positions and strides).

The same extension holds other loops with a Python fallback each: the tar header check
(``_kernel_headers.c``), the best-fit-decreasing of the ``pack`` token mode
(``_kernel_pack.c``, NOTE [ packed sequences ]; tests/tokens/test_tokens_pack_kernel.py),
a packed batch's rows (``_kernel_pack.c``, NOTE [ packed batch rows ];
tests/tokens/test_tokens_pack_rows.py), a batch's pack windows end to end
(``_kernel_pack_windows.c``, NOTE [ compiled window packing ];
tests/tokens/test_tokens_pack_windows.py), a ``chunk`` batch's inputs and labels
(``_kernel_chunk.c``, NOTE [ compiled chunk rows ]; tests/tokens/test_tokens_chunk_rows.py), a
local shard's samples cut out of the bytes read, a kept window's members gathered and a
cached shard's samples read and cut (``_kernel_cut.c``, NOTE [ one way to read a sample ],
NOTE [ kept windows ], NOTE [ cached reads ];
tests/webdataset/test_wds_cut_samples.py) and runs of samples decoded by their plans
(``_kernel_decode.c``, NOTE [ decode plans ]; tests/webdataset/test_wds_decode.py).

The extension is optional: ``pip install`` builds it when a C compiler is present and
installs the package without it otherwise, and setting ``DETSAMPLERS_NO_KERNEL=1`` before
the import turns it off. Either way the stream is the same; only the speed differs.
:func:`kernel_status` says which one runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

__all__ = ["kernel", "kernel_status"]

#: What the numpy path costs, and how to get the kernel (docs/mixing.md, table mix-d).
_COST = (
    "mixtures (MixSampler, WebDatasetMix) then compute their indices in numpy: the same "
    "stream, at about 0.6 to 0.7 of the plain chain's speed instead of about 0.9 with the "
    "kernel; every other stage runs at full speed"
)
_FIX = (
    "to build it, install a C compiler (e.g. apt-get install gcc, or xcode-select --install) "
    "and reinstall detsamplers from source (pip install --force-reinstall --no-deps ...)"
)


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("DETSAMPLERS_NO_KERNEL", "") not in ("", "0"):
        return None, "numpy (DETSAMPLERS_NO_KERNEL is set)"
    name = f"{__package__}._kernel"
    spec = importlib.util.find_spec(name)
    if spec is None:  # setup.py's optional extension: no C compiler at install time
        return None, (
            "numpy (detsamplers was installed without its compiled kernel, most likely "
            f"because no C compiler was found when it was installed; {_COST}; {_FIX})"
        )
    try:
        module = importlib.import_module(name)
    except ImportError as error:  # a broken or foreign build
        return None, (
            f"numpy (the compiled kernel {spec.origin} is there but did not load: {error}; "
            f"{_COST}; {_FIX})"
        )
    return module, "compiled"


#: The compiled kernel, or None when the numpy path runs.
kernel, _status = _load()


def kernel_status() -> str:
    """Which code computes a mixture's blocks: ``"compiled"``, or why it is numpy.

    The stream is the same either way (NOTE [ compiled mixture kernel ]); the compiled
    kernel is several times faster for a rank's block of a :class:`MixSampler` whose
    components are :class:`ReproducibleShuffleSampler` chains.

    Returns:
        ``"compiled"``, or ``"numpy (...)"`` with the reason: ``DETSAMPLERS_NO_KERNEL``
        set, an install made without a C compiler, or a kernel file that did not load
        (with its import error); the last two say what the numpy path costs and how to
        build the kernel.

    Examples:
        >>> import detsamplers as ds
        >>> ds.kernel_status().split()[0] in ("compiled", "numpy")
        True
    """
    return _status
