"""The guarded reader of input files (archplace.base.inputs), alone and behind every file option of
the CLI: each class of bad file gives one line on stderr and exit status 2."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.base.inputs import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES, Limits, read_mapping, syntax_of
from archplace.cli import main


def read(path: Path, syntax: str | None = None, **limits: int) -> dict[str, Any]:
    return read_mapping(path, "test", syntax=syntax or syntax_of(path),  # type: ignore[arg-type]
                        limits=Limits(**limits))


def refused(path: Path, syntax: str | None = None, **limits: int) -> str:
    with pytest.raises(ConfigError) as info:
        read(path, syntax, **limits)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def nested(depth: int, syntax: str) -> str:
    """A document whose innermost value sits ``depth`` levels deep (the top mapping is level 1)."""
    if syntax == "json":
        return '{"a": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"
    return "a: " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"


def laughs(levels: int) -> str:
    """The "billion laughs" YAML: 10 ** (levels + 1) values from about 40 bytes a level."""
    lines = ["l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the reader alone

def test_good_files_read_as_plain_data(tmp_path: Path) -> None:
    data = {"a": [1, 2.5, "x", None, True], "b": {"c": {"d": -3}}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
    assert read(tmp_path / "f.json") == read(tmp_path / "f.yaml") == read(tmp_path / "bom.json") == data


def test_yaml_aliases_and_merge_keys_within_the_caps(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\nlist: [*b, *b]\n")
    assert read(path) == {"base": {"x": 1, "y": 2}, "other": {"x": 3, "y": 2},
                          "list": [{"x": 1, "y": 2}, {"x": 1, "y": 2}]}
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(laughs(3))  # 11,110 values expanded: fine
    assert len(read(bomb)["l3"]) == 10


@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_depth_cap_is_exact(tmp_path: Path, syntax: str) -> None:
    path = tmp_path / f"f.{syntax}"
    path.write_text(nested(MAX_DEPTH, syntax))
    value: Any = read(path)["a"]
    for _ in range(MAX_DEPTH - 2):
        value = value[0]
    assert value == [1]
    path.write_text(nested(MAX_DEPTH + 1, syntax))
    assert f"nested deeper than {MAX_DEPTH} levels (line 1, column " in refused(path)


@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_very_deep_documents_are_refused_quickly(tmp_path: Path, syntax: str) -> None:
    """100k levels: Python's json and PyYAML raise RecursionError; the reader stops at level 65."""
    path = tmp_path / f"f.{syntax}"
    path.write_text("[" * 100_000 + "]" * 100_000)
    started = time.perf_counter()
    message = refused(path)
    assert f"nested deeper than {MAX_DEPTH} levels (line 1, column {MAX_DEPTH + 1})" in message
    assert time.perf_counter() - started < 2.0


def test_billion_laughs_is_refused_before_anything_walks_it(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(9))  # 10^10 values once expanded, 420 bytes
    started = time.perf_counter()
    message = refused(path)
    assert f"more than {MAX_VALUES:,} values once its YAML aliases are expanded (line 6, column" in message
    assert time.perf_counter() - started < 2.0


def test_long_text_aliased_many_times(tmp_path: Path) -> None:
    """Few values, but writing the names out would take gigabytes: the text is counted too."""
    path = tmp_path / "f.yaml"
    path.write_text("name: &n " + "x" * 1000 + "\nlayers: [" + ", ".join(["*n"] * 100) + "]\n")
    total = len("name") + len("layers") + 101 * 1000  # keys count too
    assert len(read(path, max_bytes=total)["layers"]) == 100
    assert f"more than {total - 1:,} characters of text once its YAML aliases are expanded (line 2, column" \
        in refused(path, max_bytes=total - 1)


def test_alias_that_deepens_past_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n")
    assert f"nested deeper than {MAX_DEPTH} levels once this YAML alias is expanded (line 2" in refused(path)


@pytest.mark.parametrize("content", ["a: &a [1, *a]\n", "a: &a {b: *a}\n", "a: &a [[[*a]]]\n"])
def test_recursive_alias(tmp_path: Path, content: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(content)
    assert "recursive YAML alias *a" in refused(path)


def test_value_cap_in_json(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text('{"a": [' + ", ".join(["1"] * 20) + "]}")
    assert read(path, max_values=22)["a"] == [1] * 20
    assert "more than 21 values (line 1, column " in refused(path, max_values=21)


def test_size_cap_checked_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: nothing is written
        handle.truncate(MAX_FILE_BYTES + 1)
    message = refused(path)
    assert f"the file is {MAX_FILE_BYTES + 1:,} bytes, larger than the {MAX_FILE_BYTES:,}-byte (64 MiB)" \
        in message
    small = tmp_path / "small.json"
    small.write_text('{"a": 1}')
    assert read(small, max_bytes=8) == {"a": 1}
    assert "the file is 8 bytes, larger than the 7-byte" in refused(small, max_bytes=7)


@pytest.mark.parametrize(("content", "message"), [
    (b"", "the file is empty"),
    (b" \n\t\n", "the file is empty (only whitespace)"),
    (b'{"a": \x00}', "binary file (NUL byte at offset 6)"),
    (b'{"a": "caf\xe9"}', "not UTF-8 text (byte 0xe9 at offset 10)"),
    (b'{"a": 1,\n "b": }', "not valid JSON: Expecting value (line 2, column 7)"),
    (b"[1, 2]", "expected a JSON object at the top level, got a list"),
    (b'"text"', "expected a JSON object at the top level, got text"),
    (b'{"a": {"b": [1, NaN]}}', "field 'a.b[1]' must be a finite number, got nan"),
    (b'{"a": -Infinity}', "field 'a' must be a finite number, got -inf"),
    (b'{"a": 1e400}', "field 'a' must be a finite number, got inf"),
    (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON: a number has more than 4,300 digits"),
    (b'{"a": 1, "a": 2}', "key 'a' appears twice in one JSON object"),
])
def test_bad_json(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    assert message in refused(path)


@pytest.mark.parametrize(("content", "message"), [
    ("a: [1,\n", "not valid YAML: expected the node content, but found '<stream end>' (line 2, column 1)"),
    ("a: 1\n---\nb: 2\n", "expected a single document in the stream, but found another document (line 2"),
    ("a: \x07\n", "not valid YAML: special characters are not allowed: character U+0007 at character 3"),
    ("a: *nowhere\n", "found undefined alias 'nowhere' (line 1, column 4)"),
    ("a: !!python/object:os.system x\n", "could not determine a constructor for the tag"),
    ("- a\n- b\n", "expected a mapping of fields at the top level, got a list"),
    ("# nothing but a comment\n", "expected a mapping of fields at the top level, got nothing (null)"),
    ("a: 1\nb: 2\na: 3\n", "key 'a' appears twice in one mapping (line 3, column 1)"),
    ("a: [1, .nan]\n", "field 'a[1]' must be a finite number, got nan"),
    ("source: 2023-01-01\n", "field 'source' is a date, not text"),
    ("a: !!binary aGk=\n", "field 'a' is binary data"),
    ("a: !!set {x, y}\n", "field 'a' is a set"),
    ("1: a\n", "key 1 is not text"),
    ("a: {[1]: 2}\n", "found unhashable key"),
])
def test_bad_yaml(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(content)
    assert message in refused(path)


def test_paths_that_are_not_readable_files(tmp_path: Path) -> None:
    assert refused(tmp_path / "missing.json") == f"test file '{tmp_path / 'missing.json'}' not found"
    assert "is a directory, not a file" in refused(tmp_path)
    assert "not found" in refused(tmp_path / "missing" / "deeper.yaml")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "is not a regular file (a FIFO)" in refused(fifo)  # reading it would block
    if os.path.exists("/dev/zero"):
        with pytest.raises(ConfigError, match="not a regular file .a character device."):
            read(Path("/dev/zero"), "json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    assert refused(path) == f"test file '{path}': cannot read (Permission denied)"


@given(st.binary(max_size=300))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_arbitrary_bytes_give_a_mapping_or_one_line(tmp_path: Path, content: bytes) -> None:
    for syntax in ("json", "yaml"):
        path = tmp_path / f"any.{syntax}"
        path.write_bytes(content)
        try:
            data = read(path)
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))
        else:
            assert isinstance(data, dict)


# Text without control or line-separator characters, which PyYAML's own dump/load pair does not
# round-trip (it writes U+0085 as a line break).
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), max_size=8)
_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=30)


@given(st.dictionaries(_TEXT, _PLAIN, max_size=5))
@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_plain_documents_round_trip(tmp_path: Path, data: dict[str, Any]) -> None:
    """What json.dumps / yaml.safe_dump write, the reader gives back unchanged."""
    (tmp_path / "doc.json").write_text(json.dumps(data))
    (tmp_path / "doc.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    for name in ("doc.json", "doc.yaml"):
        back = read(tmp_path / name)
        assert json.dumps(back, sort_keys=True) == json.dumps(data, sort_keys=True)


def test_every_bundled_file_reads() -> None:
    from importlib.resources import files

    folders = [files("archplace.hw").joinpath(f) for f in ("presets", "spaces")]
    found = [entry for folder in folders for entry in folder.iterdir() if entry.name.endswith(".yaml")]
    found.append(files("archplace.workload").joinpath("presets/models.yaml"))
    examples = Path(__file__).parents[1] / "examples"
    found += sorted(examples.glob("*.yaml")) + sorted(examples.glob("*.json"))
    assert len(found) >= 7
    for entry in found:
        data = read_mapping(entry, "bundled", syntax=syntax_of(entry.name))
        assert data and all(isinstance(key, str) for key in data)
        assert all(not isinstance(v, float) or math.isfinite(v) for v in data.values())


# ---------------------------------------------------------------------- behind every CLI option

def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


JOB = ["--devices", "8", "--global-batch", "8"]
PLAN = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1"]
# (command line with FILE for the file, the option's syntax)
FILE_OPTIONS: dict[str, tuple[list[str], str]] = {
    "search --model": (["search", "--model", "FILE", *JOB], "json"),
    "search --space": (["search", "--model", "gpt2-xl", "--space", "FILE", *JOB], "yaml"),
    "search --cluster": (["search", "--model", "gpt2-xl", "--cluster", "FILE", *JOB], "yaml"),
    "plan --model": (["plan", "--model", "FILE", "--hardware", "tpuv4", *JOB], "json"),
    "plan --hardware": (["plan", "--model", "gpt2-xl", "--hardware", "FILE", *JOB], "yaml"),
    "plan --layer-graph": (["plan", "--layer-graph", "FILE", "--hardware", "a100-80gb", *JOB], "yaml"),
    "plan --layer-graph (json)": (["plan", "--layer-graph", "FILE", "--hardware", "a100-80gb", *JOB],
                                  "json"),
    "evaluate --model": (["evaluate", "--model", "FILE", "--hardware", "tpuv4", *JOB, *PLAN], "json"),
    "evaluate --hardware": (["evaluate", "--model", "gpt2-xl", "--hardware", "FILE", *JOB, *PLAN], "yaml"),
    "graph --model": (["graph", "--model", "FILE"], "json"),
    "estimate --model": (["estimate", "--model", "FILE", "--hardware", "tpuv4"], "json"),
    "estimate --hardware": (["estimate", "--model", "gpt2-xl", "--hardware", "FILE"], "yaml"),
    "schedule --model": (["schedule", "--model", "FILE"], "json"),
    "schedule --hardware": (["schedule", "--model", "gpt2-xl", "--hardware", "FILE"], "yaml"),
    "schedule --problem": (["schedule", "--problem", "FILE"], "json"),
}


def _sparse(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)


# bad-file class: (writes the file at a path, or makes the path something else; expected text)
BAD_FILES: dict[str, tuple[Callable[[Path, str], None], str]] = {
    "missing": (lambda path, syntax: None, "not found"),
    "directory": (lambda path, syntax: path.mkdir(), "is a directory, not a file"),
    "binary": (lambda path, syntax: path.write_bytes(b"\x7fELF\x02\x01\x00\x00"), "NUL byte at offset 6"),
    "not utf-8": (lambda path, syntax: path.write_bytes(b"a\xff\xfe"),
                  "not UTF-8 text (byte 0xff at offset 1)"),
    "empty": (lambda path, syntax: path.write_text(""), "the file is empty"),
    "whitespace": (lambda path, syntax: path.write_text("\n  \n"), "the file is empty (only whitespace)"),
    "huge": (lambda path, syntax: _sparse(path), "larger than the 67,108,864-byte (64 MiB) limit"),
    "deep": (lambda path, syntax: path.write_text("[" * 50_000 + "]" * 50_000),
             f"nested deeper than {MAX_DEPTH} levels (line 1, column {MAX_DEPTH + 1})"),
    "syntax error": (lambda path, syntax: path.write_text('{"a": 1,,}' if syntax == "json" else "a: [1,\n"),
                     "not valid "),
    "top-level list": (lambda path, syntax: path.write_text("[1, 2]"), "at the top level, got a list"),
    "non-finite": (lambda path, syntax: path.write_text('{"a": NaN}' if syntax == "json" else "a: .nan\n"),
                   "field 'a' must be a finite number, got nan"),
    "duplicate key": (lambda path, syntax: path.write_text('{"a": 1, "a": 2}' if syntax == "json"
                                                           else "a: 1\na: 2\n"), "key 'a' appears twice"),
    "alias bomb": (lambda path, syntax: path.write_text(laughs(9)),
                   "values once its YAML aliases are expanded"),
    "recursive alias": (lambda path, syntax: path.write_text("a: &a [1, *a]\n"), "recursive YAML alias *a"),
}
_YAML_ONLY = {"alias bomb", "recursive alias"}


def _cases() -> list[Any]:
    cases = []
    for option, (_, syntax) in FILE_OPTIONS.items():
        for bad in BAD_FILES:
            if bad in _YAML_ONLY and syntax == "json":
                continue
            cases.append(pytest.param(option, bad, id=f"{option}-{bad}"))
    return cases


@pytest.mark.parametrize(("option", "bad"), _cases())
def test_every_file_option_refuses_every_bad_file_class(option: str, bad: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    argv, syntax = FILE_OPTIONS[option]
    path = tmp_path / f"input.{syntax}"
    make, message = BAD_FILES[bad]
    make(path, syntax)
    code, err = run([str(path) if a == "FILE" else a for a in argv], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("archplace: error: ") and "Traceback" not in err
    assert message in err and str(path) in err, err


def _arbitrary_bytes(option: str, content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, syntax = FILE_OPTIONS[option]
    path = tmp_path / f"input.{syntax}"
    path.write_bytes(content)
    code, err = run([str(path) if a == "FILE" else a for a in argv], capsys)
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("archplace: error: "), err


def _arbitrary_bytes_test(examples: int) -> Any:
    test = given(content=st.binary(max_size=200))(_arbitrary_bytes)
    test = settings(max_examples=examples, suppress_health_check=[HealthCheck.function_scoped_fixture])(test)
    return pytest.mark.parametrize("option", list(FILE_OPTIONS))(test)


# 4 files of arbitrary bytes per option in the default run, 25 in the slow one (CI runs both)
test_arbitrary_bytes_in_every_file_option = _arbitrary_bytes_test(4)
test_arbitrary_bytes_in_every_file_option_more = pytest.mark.slow(_arbitrary_bytes_test(25))
