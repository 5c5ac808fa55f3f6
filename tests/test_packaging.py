"""The package's metadata: setuptools reads pyproject.toml without a deprecation warning."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[1]


def test_setuptools_reads_the_license_as_an_spdx_string_without_a_deprecation_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SetuptoolsDeprecationWarning would raise here
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "Apache-2.0"
    assert dist.metadata.license_files == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    # setuptools 77 is the first to take an SPDX string: an isolated build must not get less.
    requires = re.search(r"^requires = (.*)$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert requires is not None and '"setuptools>=77"' in requires.group(1)
