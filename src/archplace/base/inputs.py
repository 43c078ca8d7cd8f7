"""One guarded reader for every input file (model config.json, hardware, space and cluster YAML,
layer graphs, schedule problems).

:func:`read_mapping` returns the file's top-level mapping as plain data (dicts with text keys,
lists, text, whole numbers, finite floats, booleans and None) or raises one
:class:`~archplace.base.errors.ConfigError` line that names the file and the problem:

* a missing path, a directory, or anything but a regular file (a FIFO or device could block
  or never end);
* a file larger than :data:`MAX_FILE_BYTES` (checked with ``stat`` before reading; the read
  itself stops one byte past the cap in case the file grows);
* a binary file (a NUL byte) or text that is not UTF-8 (with the byte offset); a UTF-8 byte
  order mark is skipped;
* an empty or whitespace-only file;
* a syntax error, with the parser's line and column;
* nesting deeper than :data:`MAX_DEPTH` levels (Python's ``json`` and PyYAML recurse and
  raise RecursionError near 1,000 levels);
* more than :data:`MAX_VALUES` values, or more than :data:`MAX_FILE_BYTES` characters of
  text, counting a YAML alias as the values and text it stands for (a "billion laughs"
  document is small and loads fast, because PyYAML shares aliased nodes, but anything that
  walks or writes out the data explodes); a YAML alias inside its own anchor (a data
  structure that contains itself);
* a non-finite number anywhere (``NaN``/``Infinity`` are accepted by Python's ``json``;
  ``1e400`` reads as infinity), a YAML value that is not plain data (a date, binary, a set)
  or a mapping key that is not text, naming the field;
* a top level that is not a mapping.

Sources: RFC 8259 (JSON), YAML 1.1 as implemented by PyYAML's SafeLoader.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml

from archplace.base.errors import ConfigError

MAX_FILE_BYTES = 64 * 2**20
"""Largest input file read, bytes (64 MiB)."""

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted, levels (the top-level mapping is level 1)."""

MAX_VALUES = 1_000_000
"""Most values (scalars, lists and mappings; YAML aliases expanded) in one document."""

Syntax = Literal["json", "yaml"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on one document (defaults: :data:`MAX_FILE_BYTES`, :data:`MAX_DEPTH`, :data:`MAX_VALUES`).

    Attributes:
        max_bytes: largest file, bytes; also the most characters of text, YAML aliases expanded.
        max_depth: deepest nesting, levels.
        max_values: most values, YAML aliases expanded.
    """

    max_bytes: int = MAX_FILE_BYTES
    max_depth: int = MAX_DEPTH
    max_values: int = MAX_VALUES


def syntax_of(path: str | os.PathLike[str]) -> Syntax:
    """``json`` for a ``*.json`` file name (any case), else ``yaml``."""
    return "json" if os.fspath(path).lower().endswith(".json") else "yaml"


def read_mapping(source: str | os.PathLike[str] | Traversable, kind: str, *, syntax: Syntax,
                 label: str | None = None, limits: Limits | None = None) -> dict[str, Any]:
    """The top-level mapping of a JSON or YAML file, as plain data.

    Args:
        source: a file path, or a bundled resource.
        kind: what the file is, for messages (``model config``, ``hardware preset``, ...).
        syntax: ``json`` (strict: RFC 8259 plus the NaN/Infinity tokens, which are then
            refused) or ``yaml`` (PyYAML's safe loader).
        label: how to name the file in messages (default: the path as given).
        limits: the caps on size, depth and values (default: :class:`Limits`).

    Raises:
        ConfigError: one line naming the file and the problem (see the module docstring).
    """
    name = label if label is not None else _label(source)
    limits = limits or Limits()
    text = _text(_read_bytes(source, kind, name, limits.max_bytes), name)
    data = _parse_json(text, name, limits) if syntax == "json" else _parse_yaml(text, name, limits)
    if not isinstance(data, dict):
        what = "a JSON object" if syntax == "json" else "a mapping of fields"
        raise ConfigError(f"{name}: expected {what} at the top level, got {_type_name(data)}")
    _check_plain(data, name)
    return data


def _label(source: str | os.PathLike[str] | Traversable) -> str:
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return source.name


# ----------------------------------------------------------------------------- bytes and text

def _read_bytes(source: str | os.PathLike[str] | Traversable, kind: str, name: str, cap: int) -> bytes:
    if not isinstance(source, str | os.PathLike):  # a bundled resource (e.g. inside a zip)
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{kind} file {name!r}: cannot read ({exc.strerror or exc})") from None
        return _within_cap(data, name, cap)
    path = Path(source)
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"{kind} file {name!r} not found") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the path
        raise ConfigError(f"{kind} file {name!r}: cannot read ({getattr(exc, 'strerror', None) or exc})") \
            from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{kind} file {name!r} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{kind} file {name!r} is not a regular file ({_file_type(info.st_mode)})")
    if info.st_size > cap:
        raise ConfigError(_too_large(name, f"{info.st_size:,} bytes", cap))
    try:
        with path.open("rb") as handle:
            data = handle.read(cap + 1)
    except OSError as exc:
        raise ConfigError(f"{kind} file {name!r}: cannot read ({exc.strerror or exc})") from None
    return _within_cap(data, name, cap)


def _file_type(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a file"


def _within_cap(data: bytes, name: str, cap: int) -> bytes:
    if len(data) > cap:
        raise ConfigError(_too_large(name, f"more than {cap:,} bytes", cap))
    return data


def _too_large(name: str, size: str, cap: int) -> str:
    return (f"{name}: the file is {size}, larger than the {cap:,}-byte ({cap / 2**20:g} MiB) limit "
            "for input files")


def _text(data: bytes, name: str) -> str:
    nul = data.find(b"\0")
    if nul >= 0:
        raise ConfigError(f"{name}: binary file (NUL byte at offset {nul}); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise ConfigError(f"{name}: the file is empty" + (" (only whitespace)" if text else ""))
    return text


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line}, column {offset - text.rfind(chr(10), 0, offset)}"


# ---------------------------------------------------------------------------------- JSON

# A string (skipped whole, escapes included) or a structural character that opens, closes or
# separates values. The possessive ``*+`` keeps an unterminated string linear.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{},]', re.DOTALL)


def _parse_json(text: str, name: str, limits: Limits) -> Any:
    _scan_json(text, name, limits)
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for key, value in pairs:
            if key in mapping:
                raise ConfigError(f"{name}: key {key!r} appears twice in one JSON object")
            mapping[key] = value
        return mapping

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") \
            from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        digits = re.search(r"limit \((\d+) digits\)", str(exc))
        what = f"a number has more than {int(digits[1]):,} digits" if digits else str(exc).splitlines()[0]
        raise ConfigError(f"{name}: not valid JSON: {what}") from None


def _scan_json(text: str, name: str, limits: Limits) -> None:
    """Refuse nesting deeper than the cap and more values than the cap, before json recurses."""
    opens = text.count("[") + text.count("{")
    if opens <= limits.max_depth and opens + text.count(",") < limits.max_values:
        return  # cannot exceed either cap (the counts include characters inside strings)
    depth, values = 0, 1
    for match in _JSON_TOKEN.finditer(text):
        char = text[match.start()]
        if char in "[{":
            depth += 1
            values += 1
            if depth > limits.max_depth:
                raise ConfigError(f"{name}: nested deeper than {limits.max_depth} levels "
                                  f"({_position(text, match.start())})")
        elif char in "]}":
            depth -= 1
        elif char == ",":
            values += 1
        if values > limits.max_values:
            raise ConfigError(f"{name}: more than {limits.max_values:,} values "
                              f"({_position(text, match.start())})")


# ---------------------------------------------------------------------------------- YAML

class _GuardedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, composing the node graph under the caps: nesting depth and
    values with aliases expanded are counted as nodes are composed, so a deep or exploding
    document is refused before anything recurses into it or walks it."""

    def __init__(self, text: str, name: str, limits: Limits) -> None:
        super().__init__(text)
        self._name = name
        self._limits = limits
        self._depth = 0  # lists and mappings open around the node being composed
        self._values = 0
        self._chars = 0
        # id(node): (values, height in lists and mappings, characters of text), once composed
        self._sizes: dict[int, tuple[int, int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                if id(target) not in self._sizes:
                    raise ConfigError(f"{self._name}: recursive YAML alias *{event.anchor} (it refers "
                                      f"to a node that contains it; {_mark(event.start_mark)})")
                values, height, chars = self._sizes[id(target)]
                self._count(values, chars, event)
                self._check_depth(self._depth + height, event, alias=True)
            return super().compose_node(parent, index)
        collection = isinstance(event, yaml.CollectionStartEvent)
        self._depth += collection
        self._check_depth(self._depth, event)
        before = (self._values, self._chars)
        self._count(1, len(event.value) if isinstance(event, yaml.ScalarEvent) else 0, event)
        node = super().compose_node(parent, index)
        self._depth -= collection
        if node is None:
            return None
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
            self._check_unique_keys(node)
        height = collection + max((self._sizes[id(child)][1] for child in children), default=0)
        self._sizes[id(node)] = (self._values - before[0], height, self._chars - before[1])
        return node

    def _check_unique_keys(self, node: yaml.MappingNode) -> None:
        """PyYAML keeps the last of two equal keys; refuse them (merge keys ``<<`` may repeat)."""
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    raise ConfigError(f"{self._name}: key {key.value!r} appears twice in one mapping "
                                      f"({_mark(key.start_mark)})")
                seen.add((key.tag, key.value))

    def _count(self, values: int, chars: int, event: yaml.Event) -> None:
        """Add a node's values and text characters (an alias: its anchor's) to the totals."""
        self._values += values
        self._chars += chars
        if self._chars > self._limits.max_bytes:  # one long text aliased many times
            raise ConfigError(f"{self._name}: more than {self._limits.max_bytes:,} characters of text once "
                              f"its YAML aliases are expanded ({_mark(event.start_mark)})")
        if self._values > self._limits.max_values:
            raise ConfigError(f"{self._name}: more than {self._limits.max_values:,} values once its YAML "
                              f"aliases are expanded ({_mark(event.start_mark)})")

    def _check_depth(self, depth: int, event: yaml.Event, alias: bool = False) -> None:
        if depth > self._limits.max_depth:
            expanded = " once this YAML alias is expanded" if alias else ""
            raise ConfigError(f"{self._name}: nested deeper than {self._limits.max_depth} levels{expanded} "
                              f"({_mark(event.start_mark)})")


def _mark(mark: Any) -> str:
    return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"


def _parse_yaml(text: str, name: str, limits: Limits) -> Any:
    try:
        loader = _GuardedLoader(text, name, limits)  # the reader refuses control characters here
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        problem = str(exc.problem)
        if exc.context and problem.startswith("but "):  # "expected a single document ..., but found"
            problem = f"{exc.context}, {problem}"
        return f"{' '.join(problem.split())} ({_mark(exc.problem_mark)})"
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        return f"{exc.reason}: character U+{exc.character:04X} at character {exc.position}"
    return " ".join(str(exc).split())


# ---------------------------------------------------------------------------- plain data

def _check_plain(data: dict[str, Any], name: str) -> None:
    """Every value is plain data: text keys, finite numbers, no dates, binary or sets."""
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    where = f" in {path!r}" if path else ""
                    raise ConfigError(f"{name}: key {key!r}{where} is not text (write it in quotes)")
                stack.append((item, f"{path}.{key}" if path else key))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(f"{name}: field {path!r} must be a finite number, got {value}")
        elif value is not None and not isinstance(value, str | int):
            raise ConfigError(f"{name}: field {path!r} is {_type_name(value)}, not text, a number, a list "
                              "or a mapping (write it in quotes to make it text)")


def _type_name(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, Mapping):
        return "a mapping"
    names = {list: "a list", str: "text", bool: "a boolean", int: "a number", float: "a number",
             bytes: "binary data", set: "a set"}
    return names.get(type(value), f"a {type(value).__name__}")


def show_value(value: object) -> str:
    """``value`` as it is written in JSON (``true``, ``"12"``, ``4.5``, ``NaN``), cut to 60
    characters: how error messages quote what the user wrote."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
