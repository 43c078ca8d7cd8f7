"""A Griffe extension for the API reference (mkdocs.yml, mkdocstrings' ``extensions``): the
package's docstrings cross-reference with Sphinx roles (``:func:`plan```,
``:class:`~archplace.placement.plan.Plan```, ``:data:`.BREAKDOWN_KEYS```), which mkdocstrings'
Google-style renderer prints raw. This extension rewrites every role, once the package is loaded,
into an mkdocs-autorefs cross-reference::

    <autoref identifier="archplace.front.api.plan" optional><code>plan</code></autoref>

The identifier is the role's target resolved as Python resolves the name in the docstring's scope
(Griffe's ``Object.resolve``: the object's members, its module's names and imports), or the
target itself when it is already a dotted path of the package, and then followed through aliases
to the object that defines it. ``optional`` makes autorefs render a plain code span when the
target has no page (a private helper, a module the reference does not show) instead of failing
the strict build. The displayed text follows Sphinx: ``~`` shows the last component only, a title
``:func:`text <target>``` shows the title. Docstrings in the source are left as they are, so
``help()`` reads the same; only the built reference changes. ``tests/test_docs.py`` fails when the
built site still holds a raw role.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(func|meth|class|attr|data|mod|exc|obj|const):`([^`]+)`")
"""A Sphinx role with its target: group 1 the role, group 2 ``target`` or ``title <target>``."""

_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def _lookup(collection: griffe.ModulesCollection, path: str) -> str | None:
    """The canonical path of the object at the dotted ``path`` (aliases followed), or None when
    the path names nothing loaded."""
    head, *rest = path.split(".")
    if head not in collection.members:
        return None
    obj: Any = collection.members[head]
    for part in rest:
        try:
            if obj.is_alias:
                obj = obj.final_target
            obj = obj.members[part]
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    try:
        return str(obj.final_target.path if obj.is_alias else obj.path)
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve(obj: griffe.Object, target: str, collection: griffe.ModulesCollection) -> str:
    """The canonical dotted path ``target`` names in ``obj``'s docstring (``target`` without its
    leading ``~`` or ``.`` when it names nothing loaded)."""
    name = target.lstrip("~").lstrip(".")
    found = _lookup(collection, name)
    if found is not None:
        return found
    head, _, tail = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            base = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        found = _lookup(collection, f"{base}.{tail}" if tail else base)
        if found is not None:
            return found
        scope = scope.parent
    return name


def display(target: str) -> str:
    """The text a role shows for ``target`` (Sphinx: ``~`` keeps the last component)."""
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def rewrite(text: str, obj: griffe.Object, collection: griffe.ModulesCollection) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs cross-reference."""

    def replace(match: re.Match[str]) -> str:
        target = match.group(2).strip()
        titled = _TITLED.match(target)
        if titled:
            target, shown = titled.group("target").strip(), titled.group("title")
        else:
            shown = display(target)
        identifier = resolve(obj, target, collection)
        return (f'<autoref identifier="{html.escape(identifier, quote=True)}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>")

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring of a loaded package (module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = rewrite(obj.docstring.value, obj, collection)
            stack.extend(member for member in obj.members.values()
                         if isinstance(member, griffe.Object))
