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

The extension is optional: ``pip install`` builds it when a C compiler is present and
installs the package without it otherwise, and setting ``DETSAMPLERS_NO_KERNEL=1`` before
the import turns it off. Either way the stream is the same; only the speed differs.
:func:`kernel_status` says which one runs.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["kernel", "kernel_status"]


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("DETSAMPLERS_NO_KERNEL", "") not in ("", "0"):
        return None, "numpy (DETSAMPLERS_NO_KERNEL is set)"
    try:
        from . import _kernel
    except ImportError as error:  # built without a C compiler, or a broken build
        return None, f"numpy (the compiled kernel did not import: {error})"
    return _kernel, "compiled"


#: The compiled kernel, or None when the numpy path runs.
kernel, _status = _load()


def kernel_status() -> str:
    """Which code computes a mixture's blocks: ``"compiled"``, or why it is numpy.

    The stream is the same either way (NOTE [ compiled mixture kernel ]); the compiled
    kernel is several times faster for a rank's block of a :class:`MixSampler` whose
    components are :class:`ReproducibleShuffleSampler` chains.

    Returns:
        ``"compiled"``, or ``"numpy (...)"`` with the reason: ``DETSAMPLERS_NO_KERNEL``
        set, or the import error of an install built without a C compiler.

    Examples:
        >>> import detsamplers as ds
        >>> ds.kernel_status().split()[0] in ("compiled", "numpy")
        True
    """
    return _status
