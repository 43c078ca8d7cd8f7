"""Test-wide fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No per-example deadline: a slow or busy CI machine must not turn a correct test red. Shrunk
# failures are still reported with their example.
settings.register_profile("archplace", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("archplace")


@pytest.fixture(autouse=True, scope="session")
def _private_graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep the on-disk graph cache of the tests out of the user's ~/.cache."""
    directory = tmp_path_factory.mktemp("graph-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("ARCHPLACE_CACHE_DIR", str(directory))
    yield directory
    patch.undo()
