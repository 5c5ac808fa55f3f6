"""Fixtures for the webdataset source tests: one folder of real shards per session."""

from __future__ import annotations

import pytest
from wds_helpers import write_shards


@pytest.fixture(scope="session")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The brace pattern of 7 shards of 3 to 20 samples (see wds_helpers.COUNTS)."""
    return write_shards(tmp_path_factory.mktemp("shards"))
