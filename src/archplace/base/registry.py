"""Choosing a pluggable part by name: one lookup for every read-only registry (search
strategies, layer-scheduling backends, executors), with one error message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from archplace.base.errors import ConfigError

T = TypeVar("T")


def lookup(registry: Mapping[str, T], name: str, kind: str) -> T:
    """``registry[name]``.

    Raises:
        ConfigError: ``name`` is not a key: "unknown ``kind`` 'name'; choose from: a, b, ..."
            (the keys in registry order).
    """
    entry = registry.get(name)
    if entry is None:
        raise ConfigError(f"unknown {kind} {name!r}; choose from: {', '.join(registry)}")
    return entry
