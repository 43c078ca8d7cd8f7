"""Test-wide fixtures."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# No per-example deadline: a slow or busy CI machine must not turn a correct test red. Shrunk
# failures are still reported with their example.
settings.register_profile("archplace", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("archplace")

# Shared test helpers (tests/helpers/: cli_helpers, the CLI run in-process) importable by every
# test module.
sys.path.insert(0, str(Path(__file__).parent / "helpers"))


@pytest.fixture(autouse=True, scope="session")
def _private_graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep the on-disk graph cache of the tests out of the user's ~/.cache: one cache for the
    whole run, shared by pytest-xdist's workers (the cache writes each file to a temporary name
    and renames it, so concurrent writers are safe), so that a model traced by one worker is
    not traced again by the other. Its parent holds nothing else."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers' base directories share a parent
        root = root.parent
    directory = root / "shared-graph-cache" / "cache"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("ARCHPLACE_CACHE_DIR", str(directory))
    yield directory
    patch.undo()


@pytest.fixture(scope="session")
def small_space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-design space YAML on the tpuv4 base (tensor cores 2, 4, 8; arrays 64, 128; vector
    cores 1, 2; 32 MiB buffer; 32 GiB HBM; no area floor), for fast real searches."""
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text("base: tpuv4\ntensor_cores: [2, 4, 8]\narray_dim: [64, 128]\nvector_cores: [1, 2]\n"
                    "buffer: [32 MiB]\nhbm: [32 GiB]\narea_min_fraction: 0.0\n")
    return path


@pytest.fixture(autouse=True)
def _sigint_disposition_kept() -> Iterator[None]:
    """Each test leaves SIGINT's handler and this thread's signal mask as it found them: code
    run in this process may make it ignore or block SIGINT, and a process that a later test
    starts would inherit that and never see its Ctrl-C."""
    before = signal.getsignal(signal.SIGINT)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # a blocked SIGINT is inherited too
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)
    if signal.pthread_sigmask(signal.SIG_BLOCK, ()) != mask:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture(autouse=True)
def _warnoptions_kept() -> Iterator[None]:
    """Each test leaves ``sys.warnoptions`` as it found it: the CLI's entry adds a filter there
    for multiprocessing's resource tracker, and every process a later test spawns would inherit
    it as a ``-W`` option."""
    before = list(sys.warnoptions)
    yield
    sys.warnoptions[:] = before
