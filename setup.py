"""Build the optional compiled kernel and ship the demo trial; the rest is in pyproject.toml.

``optional=True``: without a C compiler the package installs without the kernel and the
mixture runs its numpy path (NOTE [ compiled mixture kernel ], detsamplers/_native.py).

The demo trial lives beside the package, in ``examples/demo_trial.py`` (docs/architecture.md).
A wheel carries a copy of it as ``detsamplers/_examples/demo_trial.py``, so that
``python -m detsamplers demo`` runs from an install too (``examples_dir`` in
detsamplers/trial/_demo.py); an editable install reads ``examples/`` itself.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

DEMO = os.path.join("examples", "demo_trial.py")


class BuildWithDemo(build_py):
    """``build_py`` that also copies the demo trial into the built package."""

    def run(self) -> None:
        """Build as setuptools does, then add ``_examples/demo_trial.py`` (not editable)."""
        super().run()
        if getattr(self, "editable_mode", False) or not os.path.isfile(DEMO):
            return
        target = os.path.join(self.build_lib, "detsamplers", "_examples")
        self.mkpath(target)
        self.copy_file(DEMO, os.path.join(target, "demo_trial.py"))


setup(
    cmdclass={"build_py": BuildWithDemo},
    ext_modules=[
        Extension(
            "detsamplers._kernel",
            sources=[
                "detsamplers/_kernel.c",
                "detsamplers/_kernel_headers.c",
                "detsamplers/_kernel_pack.c",
                "detsamplers/_kernel_pack_windows.c",
                "detsamplers/_kernel_pack_index.c",
                "detsamplers/_kernel_cut.c",
                "detsamplers/_kernel_decode.c",
                "detsamplers/_kernel_chunk.c",
            ],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ],
)
