"""Make ``schedule_helpers`` (validator, brute force, strategies) importable by the tests here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
