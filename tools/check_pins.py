"""CI check: every package installed in this environment is pinned in constraints.txt.

Run with the environment's own interpreter: ``.venv/bin/python tools/check_pins.py``.
Prints one line per package that is installed but not pinned, or installed at another
version than its pin, and exits with status 1 if there is any; the packaging tools a
new venv starts with (pip, setuptools, wheel) and archplace itself are not checked,
as ``pip freeze`` leaves them out.
"""

from __future__ import annotations

import sys
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

_BOOTSTRAP = {"pip", "setuptools", "wheel", "distribute", "archplace"}


def pins(path: Path) -> dict[str, str]:
    """``{canonical name: pinned version}`` of the ``name==version`` lines of a constraints file."""
    pinned = {}
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        requirement = Requirement(text)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise SystemExit(f"{path}: {text!r} is not an exact pin (name==version)")
        pinned[canonicalize_name(requirement.name)] = specs[0].version
    return pinned


def problems(pinned: dict[str, str]) -> list[str]:
    """One message per installed distribution missing from, or differing from, ``pinned``."""
    found = []
    for dist in distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in _BOOTSTRAP:
            continue
        installed = Version(dist.version)
        if name not in pinned:
            found.append(f"{name} {dist.version} is installed but not pinned in constraints.txt")
        elif installed.public != Version(pinned[name]).public:
            found.append(f"{name} {dist.version} is installed but constraints.txt pins {pinned[name]}")
    return sorted(set(found))


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "constraints.txt")
    found = problems(pins(path))
    for line in found:
        sys.stderr.write(line + "\n")
    if found:
        sys.stderr.write("run `make lock` to re-resolve and rewrite constraints.txt\n")
        raise SystemExit(1)
    sys.stdout.write(f"every installed package is pinned in {path}\n")


if __name__ == "__main__":
    main()
