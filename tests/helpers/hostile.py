"""Hostile inputs for the CLI fuzz test (tests/test_cli_fuzz.py): MoE / MLA configs with a bad value
in any field the tracer reads, hardware files whose names are rich markup, output paths onto
special files and result stores, and result stores whose text columns were tampered with.

Each generator draws a placeholder string (``CONFIG:``, ``HWNAME:``, ``FIFO:``, ``DEVNULL``,
``STORE:``); :func:`materialise` turns it into a real path inside the case's own directory, and
:class:`Guards` checks afterwards that no special file was replaced and no store overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from small_moe import MOE_BASES

# A field's bad values: absent, zero, negative, far too large, of the wrong type.
_MISSING = object()
_BAD_VALUES: tuple[Any, ...] = (_MISSING, 0, -1, -64, 1, 3, 7, 10**6, 2**63, 1.5, True, "8", None, [], {})

# Rich markup and control text as names.
MARKUP_NAMES = ("[/oops]", "[bold]x[/bold]", "[link=file:///etc/passwd]x[/link]", "[red", "x]",
                "\\[escaped]", "[/]", "a\x1b[31mred", "emoji :smile:", "[" * 50,
                # matplotlib mathtext and a hidden legend entry; HTML in the report's figures
                "$\\frac{$", "$x$", "_hidden", "<script>alert(1)</script>", "<b>bold</b> &amp;")


def moe_configs() -> st.SearchStrategy[str]:
    """A ``CONFIG:`` placeholder: one family's small config with one or two of its fields set to a
    bad value (or removed), now and then the config unchanged."""

    @st.composite
    def draw_config(draw: st.DrawFn) -> str:
        config = dict(draw(st.sampled_from(MOE_BASES)))
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(sorted(config)))
            value = draw(st.sampled_from(_BAD_VALUES))
            if value is _MISSING:
                config.pop(name, None)
            else:
                config[name] = value
        return "CONFIG:" + json.dumps(config).encode().hex()

    return draw_config()


def markup_hardware() -> st.SearchStrategy[str]:
    """A ``HWNAME:`` placeholder: the tpuv4 preset renamed to a markup string."""
    return st.sampled_from(MARKUP_NAMES).map(lambda name: "HWNAME:" + name.encode().hex())


def special_outputs() -> st.SearchStrategy[str]:
    """An output path onto something that is not a new regular file: a FIFO in the case's
    directory, a device node (:func:`device_node`), or a copy of a result store."""
    return st.sampled_from(["FIFO:o.csv", "FIFO:o.json", "DEVNULL", "STORE:good"])


# Tampered stores: (name, SQL run on a copy of a real store).
HOSTILE_STORES: dict[str, tuple[str, ...]] = {
    "models-dotdot": ("UPDATE searches SET models = '[\"../../evil\"]'",),
    "models-absolute": ("UPDATE searches SET models = '[\"/tmp/archplace-evil\"]'",),
    "models-markup": ("UPDATE searches SET models = '[\"[/oops]\"]'",),
    "models-not-json": ("UPDATE searches SET models = '{[}'",),
    "models-huge": ("UPDATE searches SET models = '[\"' || hex(zeroblob(100000)) || '\"]'",),
    "objective-markup": ("UPDATE searches SET objective = '[/oops]'",),
    "request-empty": ("UPDATE searches SET request = '{}'",),
    "request-not-json": ("UPDATE searches SET request = 'not json'",),
    "devices-negative": ("UPDATE searches SET devices = -5",),
    "design-markup": ("UPDATE results SET design = '[bold]x' || design",),
    "design-dotdot": ("UPDATE results SET design = '../../' || design",),
    "result-not-json": ("UPDATE results SET result = '[[['",),
    "result-markup": ("UPDATE results SET result = "
                      "replace(result, '\"design\": \"', '\"design\": \"[/oops]')",),
    "key-markup": ("PRAGMA foreign_keys = OFF", "UPDATE results SET search = '[/oops]' || search",
                   "UPDATE searches SET key = '[/oops]' || key"),
}


def hostile_stores() -> st.SearchStrategy[str]:
    """A ``STORE:`` placeholder naming a tampered copy of a real store (or the good one)."""
    return st.sampled_from(["good", *HOSTILE_STORES]).map(lambda name: "STORE:" + name)


def make_stores(root: Path, make_good: Callable[[Path], None]) -> dict[str, Path]:
    """The good store (written by ``make_good``) and one tampered copy per :data:`HOSTILE_STORES`."""
    root.mkdir(parents=True, exist_ok=True)
    good = root / "good.db"
    make_good(good)
    stores = {"good": good}
    for name, statements in HOSTILE_STORES.items():
        path = root / f"{name}.db"
        shutil.copyfile(good, path)
        with sqlite3.connect(path) as db:
            for statement in statements:
                db.execute(statement)
        db.close()
        stores[name] = path
    return stores


def device_node(case_dir: Path) -> Path:
    """A character device to name as an output: as root (who could replace the system's
    ``/dev/null``, so a regression must not be able to reach it), a node of the null device made
    in the case's own directory; otherwise ``/dev/null`` itself, which only root can replace."""
    if os.geteuid() != 0:
        return Path(os.devnull)
    path = case_dir / "null-device"
    if not path.exists():  # a case may name the device for several outputs
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


@dataclass
class Guards:
    """What a case must leave as it was: FIFOs stay FIFOs, device nodes character devices, and a
    store named as a plain output keeps its bytes."""

    fifos: list[Path] = field(default_factory=list)
    devices: list[Path] = field(default_factory=list)
    stores: dict[Path, bytes] = field(default_factory=dict)

    def check(self, shown: str) -> None:
        for fifo in self.fifos:
            assert stat.S_ISFIFO(os.lstat(fifo).st_mode), f"FIFO {fifo} replaced by: archplace {shown}"
        for device in self.devices:
            assert stat.S_ISCHR(os.lstat(device).st_mode), f"device {device} replaced by: archplace {shown}"
        for path, data in self.stores.items():
            assert path.read_bytes() == data, f"result store {path} overwritten by: archplace {shown}"


def materialise(value: str, previous: str | None, case_dir: Path, index: int, stores: dict[str, Path],
                hardware_text: str, guards: Guards) -> str | None:
    """The real argument for a hostile placeholder ``value`` (``previous``: the option before it),
    or None when ``value`` is not one of this module's placeholders."""
    if value.startswith("CONFIG:"):
        path = case_dir / f"model{index}" / "config.json"
        path.parent.mkdir()
        path.write_bytes(bytes.fromhex(value[7:]))
        return str(path)
    if value.startswith("HWNAME:"):
        name = bytes.fromhex(value[7:]).decode()
        path = case_dir / f"hw{index}.yaml"
        path.write_text(hardware_text.replace("name: tpuv4", f"name: {json.dumps(name)}", 1))
        return str(path)
    if value.startswith("FIFO:"):
        path = case_dir / f"{index}-{value[5:]}"
        os.mkfifo(path)
        guards.fifos.append(path)
        return str(path)
    if value == "DEVNULL":
        device = device_node(case_dir)
        guards.devices.append(device)
        return str(device)
    if value.startswith("STORE:"):
        path = case_dir / f"store{index}.db"
        shutil.copyfile(stores[value[6:]], path)
        if previous not in ("--store", None):  # named as a plain output: must not be written
            guards.stores[path] = path.read_bytes()
        return str(path)
    return None
