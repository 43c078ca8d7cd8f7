"""Rich tables and figure texts whose text is shown as it is (rendering only).

Rich reads a ``str`` cell, title or caption as console markup (``[bold]``, ``[link=...]``) and
emoji codes (``:smile:``): a name such as ``[/oops]`` -- of a hardware YAML, a model, a design,
a file -- would raise :class:`rich.errors.MarkupError` when the table is printed, or be restyled.
:class:`PlainTable` turns every string it is given into :class:`rich.text.Text`, which rich
prints verbatim.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Column, Table
from rich.text import Text, TextType


def figure_text(text: str) -> str:
    """``text`` as matplotlib draws it verbatim: every ``$`` escaped (matplotlib reads the text
    between two dollar signs as mathtext, and refuses a name such as ``a$\\frac`` with a parse
    error when the figure is drawn); a leading ``_``, which hides a legend entry, kept visible by
    a zero-width space in front of it."""
    text = text.replace("$", r"\$")
    return f"\u200b{text}" if text.startswith("_") else text


def plain(value: Any, style: str = "") -> Any:
    """``value`` as :class:`~rich.text.Text` in ``style`` when it is a string (so printed
    verbatim), else as is."""
    return Text(value, style=style) if isinstance(value, str) else value


class PlainTable(Table):
    """A :class:`rich.table.Table` whose titles, captions, column headers and cells given as
    strings are printed as plain text, never read as markup or emoji codes (also a ``title`` or
    ``caption`` assigned after the table is made)."""

    def __init__(self, *headers: Column | str, title: TextType | None = None,
                 caption: TextType | None = None, **options: Any) -> None:
        super().__init__(*headers, title=title, caption=caption, **options)  # through add_column

    @property
    def title(self) -> TextType | None:
        """The title (a :class:`~rich.text.Text`)."""
        return self._plain_title

    @title.setter
    def title(self, value: TextType | None) -> None:
        self._plain_title: TextType | None = plain(value, "table.title")  # rich's style of a title

    @property
    def caption(self) -> TextType | None:
        """The caption (a :class:`~rich.text.Text`)."""
        return self._plain_caption

    @caption.setter
    def caption(self, value: TextType | None) -> None:
        self._plain_caption: TextType | None = plain(value, "table.caption")

    def add_column(self, header: RenderableType = "", *args: Any, **options: Any) -> None:
        """:meth:`rich.table.Table.add_column`, a string header as plain text."""
        super().add_column(plain(header), *args, **options)

    def add_row(self, *renderables: RenderableType | None, **options: Any) -> None:
        """:meth:`rich.table.Table.add_row`, string cells as plain text."""
        super().add_row(*(plain(cell) for cell in renderables), **options)
