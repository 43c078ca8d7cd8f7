"""Fixtures of the calibration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration_runs import TRUTH, write_runs


@pytest.fixture(scope="session")
def synthetic_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs file of :data:`RUNS` measured with :data:`TRUTH` (traced once per session)."""
    return write_runs(tmp_path_factory.mktemp("calibration") / "runs.yaml", TRUTH)
