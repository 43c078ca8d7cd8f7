"""Command-line options derived from the run specs' declared fields (:mod:`archplace.base.options`).

``plan`` takes the fields of :class:`~archplace.front.specs.ModelSpec`,
:class:`~archplace.front.specs.HardwareSpec`, :class:`~archplace.front.specs.ClusterSpec` and
:class:`~archplace.front.specs.PlanSpace`; ``evaluate`` those of the first three and of
:class:`~archplace.front.specs.Plan`; ``search`` those of :class:`~archplace.front.specs.search.SearchSpec`;
``graph``, ``estimate`` and ``schedule`` those of the model spec (the last two without
``fuse``). :func:`with_options` adds one typer option per field to a command's signature (the
command receives them as keyword arguments), and :func:`fields_of` (or :func:`given_fields`)
turns a given option back into the field it sets. The rules, by the field's type:

* a whole number, a number or a text: one value (``--tp 8``); an enum: one of its values;
* a tuple: the option repeated, each time one value (``--tp 2 --tp 4``);
* a field with a ``parse`` function: one text, parsed (``--stages 0-12,13-25``);
* a bool: a flag (``--sp``); a bool that defaults to true: its negation (``--no-sp``); a bool
  that may be None: both (``--tp-comm-overlap/--no-tp-comm-overlap``).

Every option defaults to "not given" (None, or False for a flag), so a file's field or the
spec's default applies (:mod:`archplace.cli.runs`); the help shows the spec's default.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from archplace.base.options import Declared, declared


@dataclass(frozen=True)
class CliOption:
    """One command-line option derived from a spec field.

    Attributes:
        field: the declared field it sets.
        parameter: the command's keyword parameter (its name, type and typer option).
    """

    field: Declared
    parameter: inspect.Parameter

    @property
    def name(self) -> str:
        """The command's parameter name (``tp``, ``no_sp``, ``top``)."""
        return self.parameter.name

    def field_value(self, value: Any) -> Any:
        """The field's value of the option's ``value`` as typer gives it (a list stays a list);
        None when the option sets nothing (an empty list, a None)."""
        d = self.field
        if value is None:
            return None
        if d.option.parse is not None:
            parsed = d.option.parse(value)
            if not isinstance(parsed, tuple):
                return parsed
            return [list(item) if isinstance(item, tuple) else item for item in parsed]
        if d.element is not None:
            return list(value) if value else None
        if d.negated:
            return not value
        return value


def _value_type(d: Declared) -> Any:
    kind = d.element if d.element is not None else d.type
    if d.enum is not None or d.option.parse is not None:
        return str
    if kind not in (int, float, str, bool):
        raise TypeError(f"{d.spec.__name__}.{d.name}: no command-line form for {kind!r}; give it a "
                        "parse function or cli=False")
    return kind


def cli_option(d: Declared) -> CliOption:
    """The command-line option of the declared field ``d`` (the rules in the module's docstring).

    Raises:
        TypeError: a field whose type has no command-line form.
    """
    flag = d.flag
    if d.type is bool and not d.optional:
        annotation: Any = Annotated[bool, typer.Option(flag, help=d.help)]
        default: Any = False
    elif d.type is bool:
        annotation = Annotated[bool | None, typer.Option(f"{flag}/--no-{flag[2:]}", help=d.help)]
        default = None
    else:
        value = _value_type(d)
        kind = list[value] if d.element is not None and d.option.parse is None else value  # type: ignore[valid-type]
        annotation = Annotated[kind | None, typer.Option(flag, help=d.help, metavar=d.metavar)]
        default = None
    name = flag[2:].replace("-", "_")
    return CliOption(d, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                          annotation=annotation))


def cli_options(*specs: type, exclude: tuple[str, ...] = ()) -> dict[str, CliOption]:
    """The command-line options of every field of ``specs`` offered on the command line (an
    :class:`~archplace.base.options.Option` with ``cli`` true) but the fields named in
    ``exclude``, by parameter name.

    Raises:
        TypeError: two fields that would share an option.
    """
    out: dict[str, CliOption] = {}
    for spec in specs:
        for d in declared(spec).values():
            if not d.option.cli or d.name in exclude:
                continue
            option = cli_option(d)
            if option.name in out:
                raise TypeError(f"{d.spec.__name__}.{d.name} and {out[option.name].field.spec.__name__}."
                                f"{out[option.name].field.name} would share {d.flag}")
            out[option.name] = option
    return out


def with_options(*specs: type, exclude: tuple[str, ...] = ()
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command whose signature ends in ``**options``: its signature gains one keyword
    parameter per option of :func:`cli_options` (typer reads the signature), passed in
    ``options``."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command, eval_str=True)
        kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        added = [option.parameter for option in cli_options(*specs, exclude=exclude).values()]
        clash = {p.name for p in kept} & {p.name for p in added}
        if clash:
            raise TypeError(f"{command.__name__}: its own parameters {sorted(clash)} are derived options")

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return command(*args, **kwargs)

        wrapper.__signature__ = own.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
        return wrapper

    return decorate


def fields_of(options: Mapping[str, CliOption], nested: Mapping[type, str] | None = None,
              ) -> Callable[[str, Any], dict[str, Any]]:
    """A function from an option's parameter name and value to the run fields it sets: the
    field's name and value (:meth:`CliOption.field_value`), under ``nested[spec]`` when the
    field's spec is nested in the run (``{Plan: "plan"}``); a name that is not a derived option
    maps to itself."""
    nesting = dict(nested or {})

    def fields(name: str, value: Any) -> dict[str, Any]:
        option = options.get(name)
        if option is None:
            return {name: value}
        converted = option.field_value(value)
        if converted is None:
            return {}
        key = nesting.get(option.field.spec)
        return {key: {option.field.name: converted}} if key else {option.field.name: converted}

    return fields


def given_fields(spec: type, options: Mapping[str, Any], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``spec`` that a command's derived ``options`` set (:func:`with_options` with
    ``spec`` and ``exclude``), by field name; an option not given sets nothing, so the called
    function's default applies."""
    derived = cli_options(spec, exclude=exclude)
    fields = fields_of(derived)
    out: dict[str, Any] = {}
    for name in derived:
        out.update(fields(name, options[name]))
    return out
