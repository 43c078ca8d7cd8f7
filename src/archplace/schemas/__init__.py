"""The JSON documents archplace writes: their kinds, the stamp every one carries, and the JSON
Schemas (draft 2020-12) that describe them, shipped with the package.

Every JSON document the command line writes (``graph --json``, ``estimate --json``, ``estimate
matmul --json``, ``schedule --json`` and ``--dump-problem``, ``plan --json``, ``evaluate --json``,
``search --out``) starts with two fields added by :func:`stamp`:

* ``"schema_version"``: an integer per kind of document, raised whenever the document's
  structure changes in a way a reader could notice (a key removed, renamed or retyped);
* ``"archplace_version"``: the version of the archplace that wrote it.

The schema of a kind is the file ``<kind>.schema.json`` next to this module; the parts several
kinds share (a plan, a plan's result, an accelerator, a design's result) are in
``common.schema.json`` and referred to by its id ``urn:archplace:schema:common``.
:func:`load_schema` returns a kind's schema with the common one embedded, ready for any
draft 2020-12 validator::

    from jsonschema import Draft202012Validator
    Draft202012Validator(archplace.schemas.load_schema("plan")).validate(document)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from archplace._version import __version__
from archplace.base.errors import ConfigError, InternalError

SCHEMA_VERSIONS: Mapping[str, int] = MappingProxyType({
    "graph": 1,  # graph --json
    "estimate": 1,  # estimate --json
    "estimate-matmul": 1,  # estimate matmul --json (with --array or --hardware)
    "schedule": 1,  # schedule --json
    "schedule-problem": 1,  # schedule --dump-problem (what schedule --problem reads)
    "plan": 1,  # plan --json
    "evaluate": 1,  # evaluate --json
    "search": 1,  # search --out
})
"""Schema version of every kind of document (the kinds are its keys)."""

STAMP_KEYS = ("schema_version", "archplace_version")
"""The keys :func:`stamp` adds, first in the document."""

_COMMON = "common"


def _kind(kind: str) -> int:
    try:
        return SCHEMA_VERSIONS[kind]
    except KeyError:
        raise ConfigError(f"unknown document kind {kind!r}; known: {', '.join(SCHEMA_VERSIONS)}") from None


def stamp(kind: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with ``schema_version`` (of ``kind``) and ``archplace_version`` first.

    Raises:
        ConfigError: an unknown kind.
        InternalError: the document already has one of those keys.
    """
    version = _kind(kind)
    clash = [key for key in STAMP_KEYS if key in document]
    if clash:
        raise InternalError(f"{kind} document already has {', '.join(clash)}")
    return {"schema_version": version, "archplace_version": __version__, **document}


def check_stamp(kind: str, data: Mapping[str, Any], where: str) -> None:
    """Refuse a document read back (e.g. a dumped schedule problem) whose stamp says another
    schema version of ``kind`` than this archplace reads; a document without a stamp passes.

    Raises:
        ConfigError: an unknown kind; or, naming ``where``, a schema version that is not this
            archplace's, or an ``archplace_version`` that is not text.
    """
    version = _kind(kind)
    if "schema_version" in data and (isinstance(data["schema_version"], bool)
                                     or data["schema_version"] != version):
        raise ConfigError(f"{where}: schema_version {data['schema_version']!r} of a {kind} document; this "
                          f"archplace reads version {version}")
    if "archplace_version" in data and not isinstance(data["archplace_version"], str):
        raise ConfigError(f"{where}: archplace_version must be text, got {data['archplace_version']!r}")


def _read(name: str) -> dict[str, Any]:
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the documents of ``kind`` (a key of
    :data:`SCHEMA_VERSIONS`), with the shared definitions of ``common.schema.json`` embedded
    under ``$defs/common`` so that it validates on its own. A new dict on every call.

    Raises:
        ConfigError: an unknown kind.
    """
    _kind(kind)
    schema = _read(kind)
    schema.setdefault("$defs", {})[_COMMON] = _read(_COMMON)  # an embedded resource: its own $id
    return schema
