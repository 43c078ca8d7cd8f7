"""Checks shared by the spec classes: each names the field it refuses, never a CLI flag."""

from __future__ import annotations

import dataclasses
import enum
import functools
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypeVar

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.options import Declared, declared, declared_range

_E = TypeVar("_E", bound=enum.Enum)


def member(enum_type: type[_E], value: object, field: str) -> _E:
    """``value`` (a member or its value, any case) as a member of ``enum_type``.

    Raises:
        ConfigError: "``field``: unknown NAME VALUE; choose from: ..." (NAME is the field's
            last part, singular; ``value`` for a field ending in "ss").
    """
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        for item in enum_type:
            if str(item.value) == value.strip().lower():
                return item
    name = field.rsplit(".", 1)[-1]
    if name.endswith("ss"):  # not a plural (loss): the CLI spells the field's name as its flag
        name = "value"
    elif name.endswith("s"):
        name = name[:-1]
    choices = ", ".join(str(item.value) for item in enum_type)
    raise ConfigError(f"{field}: unknown {name} {value!r}; choose from: {choices}")


def members(enum_type: type[_E], values: object, field: str) -> tuple[_E, ...]:
    """Each of a non-empty list of ``values`` as a member (:func:`member`), once each, in order.

    Raises:
        ConfigError: not a list, empty, or an unknown value.
    """
    items = sequence(values, field)
    return tuple(dict.fromkeys(member(enum_type, value, field) for value in items))


def flag(value: object, field: str) -> bool:
    """``value`` when it is a bool.

    Raises:
        ConfigError: "``field`` must be true or false, got VALUE".
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{field} must be true or false, got {limits.shown(value)}")
    return value


def flags(values: object, field: str) -> tuple[bool, ...]:
    """A non-empty list of bools, once each, in order.

    Raises:
        ConfigError: not a list, empty, or a member that is not a bool.
    """
    return tuple(dict.fromkeys(flag(value, field) for value in sequence(values, field)))


def integral(value: object) -> object:
    """``value`` as an int when it is an integral number other than a bool (NumPy's included);
    anything else as it is (for the range check to refuse)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return value


NOT_DERIVED = object()
"""What :func:`checked` returns for a field whose check its declaration does not give (a text,
a nested list): the spec checks it itself."""


def checked(field: Declared, value: object, where: str) -> Any:
    """``value`` of the declared ``field`` checked and normalised from its declaration alone:
    None for an optional field; an enum member (or a tuple of them, once each) from a member or
    its value; a bool (tuple of bools); a whole number (tuple of them, once each) or a finite
    float in the declared range (:func:`archplace.base.options.span`). ``where`` names the field in
    errors (``plan.tp``: "plan.tp must be a whole number from 1 to ...") and is their
    ``fields`` (the CLI shows the option that sets it).

    Returns:
        the normalised value, or :data:`NOT_DERIVED` for a type the declaration does not check.

    Raises:
        ConfigError: a value of the wrong type, unknown or out of range.
        TypeError: a number field that declares no range.
    """
    if value is None and field.optional:
        return None
    try:
        return _checked(field, value, where)
    except ConfigError as exc:
        raise ConfigError(str(exc), fields=(where,)) from None


def _checked(field: Declared, value: object, where: str) -> Any:
    kind, element = field.type, field.element
    if field.enum is not None:
        return member(field.enum, value, where) if element is None else members(field.enum, value, where)
    if kind is bool:
        return flag(value, where)
    if element is bool:
        return flags(value, where)
    if kind not in (int, float) and element is not int:
        return NOT_DERIVED
    low, high = declared_range(field.spec, field.name)
    if kind is float:
        return limits.finite(where, value, low, high)
    if kind is int:
        return limits.whole(where, integral(value), int(low), int(high))
    return tuple(dict.fromkeys(limits.whole(where, integral(item), int(low), int(high))
                               for item in sequence(value, where)))


def check_declared(obj: Any, prefix: str = "", spec: type | None = None) -> None:
    """Check and normalise, in place, every declared field of the frozen dataclass ``obj`` whose
    check its declaration gives (:func:`checked`; errors name ``prefix`` + the field), in field
    order: the fields of ``spec`` (default: ``obj``'s class; a spec whose subclasses add fields
    of their own names itself). Called from the spec's ``__post_init__``, before the checks
    that relate fields.

    Raises:
        ConfigError: as :func:`checked`.
    """
    for name, field, normal in _normal_tests(type(obj) if spec is None else spec):
        value = getattr(obj, name)
        if normal(value):  # already what the check would return (the engine builds many plans)
            continue
        value = checked(field, value, prefix + name)
        if value is not NOT_DERIVED:
            object.__setattr__(obj, name, value)


@functools.cache
def _normal_tests(spec: type) -> tuple[tuple[str, Declared, Callable[[object], bool]], ...]:
    """Per declared field of ``spec``, a quick test that a value is already normal: the value
    :func:`checked` would return unchanged (a member, a bool, a whole number in range, a tuple of
    distinct ones), or a field it does not check."""
    out: list[tuple[str, Declared, Callable[[object], bool]]] = []
    for name, field in declared(spec).items():
        kind = field.element if field.element is not None else field.type
        one: Callable[[object], bool] | None = None
        if field.enum is not None:
            one = _is_type(field.enum)
        elif kind is bool:
            one = _is_bool
        elif kind is int or (kind is float and field.element is None):
            one = _in_range(kind, *declared_range(spec, name))
        out.append((name, field, _always if one is None else
                    _normal(one, listed=field.element is not None, optional=field.optional)))
    return tuple(out)


def _always(value: object) -> bool:
    return True


def _is_bool(value: object) -> bool:
    return value is True or value is False


def _is_type(kind: type) -> Callable[[object], bool]:
    return lambda value: type(value) is kind


def _in_range(kind: type, low: float, high: float) -> Callable[[object], bool]:
    return lambda value: type(value) is kind and low <= value <= high  # type: ignore[operator]


def _normal(one: Callable[[object], bool], *, listed: bool, optional: bool) -> Callable[[object], bool]:
    def test(value: object) -> bool:
        if value is None:
            return optional
        if not listed:
            return one(value)
        return (type(value) is tuple and len(value) > 0 and all(one(v) for v in value)
                and len(set(value)) == len(value))
    return test


def text(value: object, field: str, what: str) -> str:
    """``value`` when it is a non-empty string.

    Raises:
        ConfigError: "``field`` must be ``what``, got VALUE".
    """
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{field} must be {what}, got {limits.shown(value)}")
    return value


def sequence(values: object, field: str) -> tuple[Any, ...]:
    """``values`` (a list or tuple, not a string or mapping) as a non-empty tuple.

    Raises:
        ConfigError: not a list, or empty.
    """
    if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{field} must be a list, got {limits.shown(values)}")
    items = tuple(values)
    if not items:
        raise ConfigError(f"{field} needs at least one value")
    return items


def current_names(data: Mapping[Any, Any], specs: tuple[type, ...], owner: str) -> dict[Any, Any]:
    """``data`` with each key that is an earlier name of a field of ``specs``
    (:attr:`archplace.base.options.Option.formerly`) renamed to the field's name, in order.

    Raises:
        ConfigError: a mapping that gives a field under both names ("``owner``: 'micro_batches'
            is the earlier name of 'micro_batch_sizes': give one of them").
    """
    earlier = {old: d.name for spec in specs for d in declared(spec).values() for old in d.option.formerly}
    out: dict[Any, Any] = {}
    for key, value in data.items():
        name = earlier.get(key, key) if isinstance(key, str) else key
        if name in out or (name != key and name in data):
            raise ConfigError(f"{owner}: {key!r} is the earlier name of {name!r}: give one of them",
                              fields=(name,))
        out[name] = value
    return out


def check_keys(cls: type[Any], data: object, owner: str, *, ignored: tuple[str, ...] = ()) -> dict[str, Any]:
    """``data``'s items that are fields of the dataclass ``cls`` (``ignored`` keys dropped).

    A key that is a field's earlier name is read as the field (:func:`current_names`).

    Raises:
        ConfigError: ``data`` is not a mapping, has keys that are not fields (named), or lacks a
            field without a default (named).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner} must be a mapping, got {limits.shown(data)}")
    data = current_names(data, (cls,), owner)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [str(key) for key in data if key not in fields and key not in ignored]
    if unknown:
        raise ConfigError(f"{owner}: unknown field{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(k) for k in unknown)}; known: {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{owner}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                          fields=tuple(missing))
    return {key: value for key, value in data.items() if key in fields}


def plain(value: object) -> Any:
    """``value`` in JSON form: enum members as their values, tuples as lists (recursively)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    return value


def as_dict(obj: Any) -> dict[str, Any]:
    """Every field of the dataclass ``obj`` in JSON form (:func:`plain`)."""
    return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def store(obj: Any, name: str, value: object) -> None:
    """Set field ``name`` of the frozen dataclass ``obj`` (its normalised value, in __post_init__)."""
    object.__setattr__(obj, name, value)


class FlatSpec:
    """Mixin of a spec whose JSON form is its fields (enum members by value, tuples as lists):
    ``to_dict`` / ``from_dict``, with the spec's name in ``OWNER`` for error messages."""

    OWNER: ClassVar[str] = "spec"

    def to_dict(self) -> dict[str, Any]:
        """JSON form: every field (:func:`as_dict`)."""
        return as_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`; a missing key with a default takes it.

        Raises:
            ConfigError: not a mapping, an unknown or missing key (named), or a bad value.
        """
        return cls(**check_keys(cls, data, cls.OWNER))


def check_as(spec: type, name: str, value: object, where: str | None = None) -> Any:
    """``value`` checked as field ``name`` of ``spec`` (:func:`checked`; errors name ``where``,
    by default ``name``): a front-door keyword that means a spec's field (``api.graph``'s
    ``micro_batch`` is a plan's) takes its declared type and range from there.

    Raises:
        ConfigError: as :func:`checked`.
    """
    return checked(declared(spec)[name], value, name if where is None else where)
