"""Test-wide fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep the on-disk graph cache of the tests out of the user's ~/.cache."""
    directory = tmp_path_factory.mktemp("graph-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("ARCHPLACE_CACHE_DIR", str(directory))
    yield directory
    patch.undo()
