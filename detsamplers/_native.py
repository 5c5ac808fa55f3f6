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
tests/tokens/test_tokens_pack_windows.py), the pack index's bin counts
(``_kernel_pack_index.c``, NOTE [ compiled pack index ];
tests/tokens/test_tokens_pack_index.py), a ``chunk`` batch's inputs and labels
(``_kernel_chunk.c``, NOTE [ compiled chunk rows ]; tests/tokens/test_tokens_chunk_rows.py), a
local shard's samples cut out of the bytes read, a kept window's members gathered and a
cached shard's samples read and cut (``_kernel_cut.c``, NOTE [ one way to read a sample ],
NOTE [ kept windows ], NOTE [ cached reads ];
tests/webdataset/test_wds_cut_samples.py), runs of samples decoded by their plans
(``_kernel_decode.c``, NOTE [ decode plans ]; tests/webdataset/test_wds_decode.py) and a
sample's packed small fields split back (``_kernel_fields.c``, NOTE [ packed small fields ];
tests/webdataset/test_wds_packed_kernel.py).

The extension is optional: ``pip install`` builds it when a C compiler is present and
installs the package without it otherwise, and setting ``DETSAMPLERS_NO_KERNEL=1`` before
the import turns it off. Either way the stream is the same; only the speed differs.
:func:`kernel_status` says which one runs.

A checkout pulled without a rebuild holds a kernel older than its C files: a function
missing, or one whose arguments changed, would fail mid-run. ``setup.py`` builds the C
files' CRC-32 into the module (``SOURCES``); where the C files sit beside the module (a
checkout, an editable install) and their CRC differs, the numpy path runs and
:func:`kernel_status` says to rebuild. A wheel carries no C files and is trusted.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import zlib
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


_REBUILD = (
    "rebuild it in the checkout (python setup.py build_ext --inplace, or make install, or "
    "pip install -e . again)"
)


def _sources_crc(folder: str) -> str | None:
    """The CRC-32 of the kernel's C files in ``folder`` as setup.py computes it, or None."""
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), "_kernel*.c")))
    if not paths:  # a wheel: no C files to compare with
        return None
    crc = 0
    for path in paths:
        with open(path, "rb") as file:
            crc = zlib.crc32(file.read(), crc)
    return f"{crc:08x}"


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
    built = getattr(module, "SOURCES", None)
    try:
        now = _sources_crc(os.path.dirname(os.path.abspath(spec.origin or "")))
    except OSError:  # an unreadable C file: nothing to compare with
        now = None
    if now is not None and built != now:
        return None, (
            f"numpy (the compiled kernel {spec.origin} was built from other C files than "
            f"the ones beside it (built from {built or 'an older tree'}, the files now "
            f"{now}): it is stale; {_COST}; {_REBUILD})"
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
        set, an install made without a C compiler, a kernel file that did not load
        (with its import error), or a checkout's kernel built from other C files than
        the ones beside it; the last three say what the numpy path costs and how to
        build the kernel.

    Examples:
        >>> import detsamplers as ds
        >>> ds.kernel_status().split()[0] in ("compiled", "numpy")
        True
    """
    return _status
