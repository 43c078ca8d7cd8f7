"""Typed run specs: a run written down as plain, checked values (a YAML file's fields)."""

from archplace.specs.search import SearchSpec

__all__ = ["SearchSpec"]
