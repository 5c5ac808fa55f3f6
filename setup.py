"""Build the optional compiled kernel; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler the package installs without the kernel and the
mixture runs its numpy path (NOTE [ compiled mixture kernel ], detsamplers/_native.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "detsamplers._kernel",
            sources=["detsamplers/_kernel.c", "detsamplers/_kernel_headers.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
