"""Every option of a run, declared once: on the spec field it sets.

A field of a run spec (:class:`~archplace.front.specs.ModelSpec`,
:class:`~archplace.front.specs.HardwareSpec`, :class:`~archplace.front.specs.ClusterSpec`,
:class:`~archplace.front.specs.PlanSpace`, :class:`~archplace.front.specs.Plan`) is declared
with :func:`option`, which keeps an :class:`Option` in the field's metadata: its one-line help
and how the command line spells it. The field itself
gives the type, the default and (in the spec's ``__post_init__``) the range. Derived from these
records, with no second list anywhere:

* the command-line options of ``plan`` and ``evaluate`` (:mod:`archplace.cli.derived`): name,
  help, metavar, repeatability, the default shown;
* the option an error message names for a field (:func:`flags`, used by
  :func:`archplace.cli.options.cli_message`);
* which field of a plan a field of a plan space tries (``tps`` tries ``tp``: :func:`tried`).

``docs/development.md`` ("How to add a plan dimension") shows the one declaration a new option needs.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

METADATA_KEY = "archplace.option"
"""The key of a field's metadata that holds its :class:`Option`."""


@dataclass(frozen=True)
class Option:
    """How a spec field is offered to users (beside its type, default and range).

    Attributes:
        help: one line for ``--help`` and the docs, without the default (added from the field's
            default, or ``default_shown``); None on a plan space's field that ``tries`` a plan
            field: that field's help, with "the values to try".
        default_shown: the text of the bracketed default in the help (``"all valid"``); None: the
            field's default, shown as values (nothing for a bool, or a default of None).
        flag: the command-line option (``"--top"``); None: derived, ``--`` and the field's name
            with dashes (a plan space's field: the name of the plan field it tries; a bool that
            defaults to true: ``--no-NAME``).
        metavar: the placeholder in ``--help``; None: an enum's values joined by ``|``.
        tries: on a field of a space of plans (:class:`~archplace.front.specs.PlanSpace`,
            :class:`~archplace.front.specs.SearchSpec`), the field of the space's ``TRIES`` class (the
            :class:`~archplace.placement.plan.Plan`) whose values it lists (``tps`` tries ``tp``).
        parse: the command line gives one text that this function turns into the field's value
            (``--stages 0-12,13-25``, ``--zero-stage 0,1``); it raises ConfigError.
        cli: False for a field offered in files and Python only (its help says why).
        engine: True for a field the engine sets on the values it returns and no user gives
            (the layer names of a layer-DAG plan's stages): not a command-line option, keyword or
            run-file key; :func:`declared` leaves it out.
        low, high: the inclusive range of a number field (of each element of a tuple field);
            None: taken from the field it ``tries`` or is ``like`` (:func:`span`), else
            unbounded. The class's ``__post_init__`` checks them
            (:func:`archplace.base.fields.check_declared`) and the JSON Schema states them
            (:mod:`archplace.schemas.generate`).
        like: ``(spec, name)``: the field of another spec that this one means (a search's
            ``seq_len`` is a model spec's): its help, when this one gives none, and its range.
        formerly: earlier names of the field, still read as its key in files and mappings
            (:func:`archplace.base.fields.current_names`), so that a rename breaks no one's file.
    """

    help: str | None = None
    default_shown: str | None = None
    flag: str | None = None
    metavar: str | None = None
    tries: str | None = None
    parse: Callable[[str], Any] | None = None
    cli: bool = True
    engine: bool = False
    low: float | None = None
    high: float | None = None
    like: tuple[type, str] | None = None
    formerly: tuple[str, ...] = ()


def option(default: Any = dataclasses.MISSING, *, help: str | None = None,  # noqa: A002
           default_shown: str | None = None, flag: str | None = None, metavar: str | None = None,
           tries: str | None = None, parse: Callable[[str], Any] | None = None, cli: bool = True,
           engine: bool = False, low: float | None = None, high: float | None = None,
           like: tuple[type, str] | None = None, formerly: tuple[str, ...] = ()) -> Any:
    """A dataclass field with ``default`` (none: a required field) whose metadata holds an
    :class:`Option` of the other arguments."""
    info = Option(help=help, default_shown=default_shown, flag=flag, metavar=metavar, tries=tries,
                  parse=parse, cli=cli, engine=engine, low=low, high=high, like=like, formerly=formerly)
    return dataclasses.field(default=default, metadata={METADATA_KEY: info})


_KEEP: Any = object()


def redeclared(spec: type, name: str, default: Any = _KEEP, **changes: Any) -> Any:
    """A dataclass field for a subclass of ``spec`` that is ``spec``'s declared field ``name``
    with another ``default`` (left out: the same) and the :class:`Option` attributes in
    ``changes`` replaced (``default_shown="1"``), so that a variant of an option group (a
    search's plan choices, whose defaults differ) restates only what differs.

    Raises:
        StopIteration: ``spec`` has no field ``name``.
        TypeError: a key of ``changes`` that is not an :class:`Option` attribute.
    """
    field = next(f for f in dataclasses.fields(spec) if f.name == name)
    info = dataclasses.replace(field.metadata[METADATA_KEY], **changes)
    return dataclasses.field(default=field.default if default is _KEEP else default,
                             metadata={METADATA_KEY: info})


@dataclass(frozen=True)
class Declared:
    """One declared field of a spec, resolved: its spec, name, type, default and :class:`Option`.

    Attributes:
        spec: the spec class.
        name: the field's name (``tps``).
        type: the field's type with ``None`` taken out (``tuple[int, ...]``).
        optional: whether the type admits None.
        default: the field's default (``dataclasses.MISSING``: required).
        option: its :class:`Option`.
    """

    spec: type
    name: str
    type: Any
    optional: bool
    default: Any
    option: Option

    @property
    def element(self) -> Any:
        """The element type of a tuple field (``int`` of ``tuple[int, ...]``); None otherwise."""
        if typing.get_origin(self.type) is tuple:
            return typing.get_args(self.type)[0]
        return None

    @property
    def enum(self) -> type[enum.Enum] | None:
        """The enum of the field's values (its type, or its elements' type); None when none."""
        kind = self.element if self.element is not None else self.type
        return kind if isinstance(kind, type) and issubclass(kind, enum.Enum) else None

    @property
    def negated(self) -> bool:
        """A bool field that defaults to true: the command line turns it off (``--no-sp``)."""
        return self.type is bool and not self.optional and self.default is True

    @property
    def flag(self) -> str:
        """The command-line option that sets the field (:attr:`Option.flag`)."""
        if self.option.flag is not None:
            return self.option.flag
        name = (self.option.tries or self.name).replace("_", "-")
        return f"--no-{name}" if self.negated else f"--{name}"

    @property
    def text(self) -> str:
        """The help without the default: the help (:attr:`Option.help`), "(repeatable)" for a list."""
        text = self.option.help
        if text is None and self.option.like is not None:
            text = declared(self.option.like[0])[self.option.like[1]].option.help
        if text is None:
            if self.option.tries is None:
                raise TypeError(f"{self.spec.__name__}.{self.name}: an option needs its help")
            text = declared(getattr(self.spec, "TRIES"))[self.option.tries].option.help  # noqa: B009
            text = f"{text}; the values to try"
        if self.element is not None and self.option.parse is None:
            text += " (repeatable)"
        return text

    @property
    def help(self) -> str:
        """The one line of ``--help``: :attr:`text`, then the default shown in brackets."""
        shown = self.option.default_shown
        if shown is None and self.default is not dataclasses.MISSING and self.type is not bool:
            shown = _shown(self.default)
        return f"{self.text} [{shown}]." if shown else f"{self.text}."

    @property
    def metavar(self) -> str | None:
        """The placeholder of ``--help`` (:attr:`Option.metavar`, else an enum's values)."""
        if self.option.metavar is not None:
            return self.option.metavar
        kinds = self.enum
        return "|".join(str(member.value) for member in kinds) if kinds is not None else None


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return " ".join(_shown(item) for item in value)
    return str(value)


def _strip_none(kind: Any) -> tuple[Any, bool]:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        return (args[0] if len(args) == 1 else kind), len(args) < len(typing.get_args(kind))
    return kind, False


@functools.cache
def declared(spec: type) -> Mapping[str, Declared]:
    """Every field of the dataclass ``spec`` with its :class:`Option`, in field order, but those
    only the engine sets (:attr:`Option.engine`); read once per class: a read-only mapping.

    Raises:
        TypeError: a field declared without :func:`option` (every field of a run spec must be).
    """
    hints = typing.get_type_hints(spec)
    out: dict[str, Declared] = {}
    for field in dataclasses.fields(spec):
        info = field.metadata.get(METADATA_KEY)
        if not isinstance(info, Option):
            raise TypeError(f"{spec.__name__}.{field.name} is not declared with "
                            "archplace.base.options.option")
        if info.engine:
            continue
        kind, optional = _strip_none(hints[field.name])
        out[field.name] = Declared(spec, field.name, kind, optional, field.default, info)
    return types.MappingProxyType(out)


@functools.cache
def span(spec: type, name: str) -> tuple[float | None, float | None]:
    """The declared inclusive range of field ``name`` of ``spec`` (of each element of a tuple
    field): its own :attr:`Option.low` / :attr:`Option.high`, each side that it leaves None taken
    from the field it :attr:`Option.tries` (``micro_batch_sizes`` tries ``micro_batch``: the plan's
    range) or is :attr:`Option.like`; (None, None) when none declares one.
    """
    info = next(f for f in dataclasses.fields(spec) if f.name == name).metadata[METADATA_KEY]
    low, high = info.low, info.high
    source = (getattr(spec, "TRIES"), info.tries) if info.tries is not None else info.like  # noqa: B009
    if source is not None and (low is None or high is None):
        other_low, other_high = span(*source)
        low = other_low if low is None else low
        high = other_high if high is None else high
    return low, high


def declared_range(spec: type, name: str) -> tuple[float, float]:
    """The declared inclusive range (:func:`span`) of the number field ``name`` of ``spec``.

    Raises:
        TypeError: the field declares no range on one side.
    """
    low, high = span(spec, name)
    if low is None or high is None:
        raise TypeError(f"{spec.__name__}.{name} declares no range")
    return low, high


def bounds(spec: type, name: str) -> tuple[int, int]:
    """:func:`declared_range` of the whole-number field ``name`` of ``spec``, as ints.

    Raises:
        TypeError: the field declares no range on one side.
    """
    low, high = declared_range(spec, name)
    return int(low), int(high)


def tried(space: type) -> dict[str, str]:
    """The fields of a plan space that list a plan field's values: ``{"tps": "tp", ...}``."""
    return {name: d.option.tries for name, d in declared(space).items() if d.option.tries is not None}


def flags(*specs: type) -> dict[str, str]:
    """The command-line option of each field of ``specs`` by field name (the first spec that has
    a name gives its option): ``{"tp": "--tp", "tps": "--tp", "top_k": "--top", ...}``."""
    out: dict[str, str] = {}
    for spec in specs:
        for name, d in declared(spec).items():
            out.setdefault(name, d.flag)
    return out
