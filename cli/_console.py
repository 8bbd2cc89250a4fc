"""The CLI's rich consoles, made on first use.

rich costs a process about a third of importing pydantic and yaml; `day0 plan --json` prints with
`print` and never needs it, so nothing here imports rich until a message or a table is shown.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["err", "escape", "out"]


@cache
def _console(stderr: bool) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr)
    console.soft_wrap = not console.is_terminal  # piped output is not hard-wrapped (paths stay whole)
    return console


def err() -> Console:
    """The console on stderr (errors, progress)."""
    return _console(True)


def out() -> Console:
    """The console on stdout (tables, results)."""
    return _console(False)


def escape(text: str) -> str:
    """`text` shown literally inside rich markup (names from the user are text, not markup)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
