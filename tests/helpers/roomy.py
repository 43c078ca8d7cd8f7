"""A bundled hardware preset with more HBM, written as a YAML file: a plan's time is reported
when it needs more than the real chip holds (the capacity only gates the memory check; the
validation tests that price published plans archplace's memory model does not fit use it)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml


def roomy_preset(folder: Path, preset: str, hbm: str = "1 TiB") -> str:
    """The path of ``preset``'s file with ``hbm`` of HBM, written under ``folder`` (once)."""
    path = folder / f"{preset}-{hbm.replace(' ', '')}.yaml"
    if not path.exists():
        data = yaml.safe_load(resources.files("archplace.hw").joinpath(f"presets/{preset}.yaml").read_text())
        data["accelerator"]["hbm"]["value"] = hbm
        path.write_text(yaml.safe_dump(data))
    return str(path)
