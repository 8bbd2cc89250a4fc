"""Input text made safe to log and to echo: control, format and separator characters escaped, length cut.

Contract: `clean(value, limit)` returns at most `limit` characters of `str(value)` (plus a marker saying
how many were cut) in which every character of Unicode category C* (controls such as newline and ESC,
format characters such as the bidi overrides and zero-width marks, unassigned and private-use code
points) and the line/paragraph separators is written as a `\\uXXXX` escape. A delivery can therefore
never forge a log line, colour a terminal or reorder what an operator reads.
"""

from __future__ import annotations

import unicodedata

__all__ = ["clean"]


def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    category = unicodedata.category(ch)
    if category[0] == "C" or category in ("Zl", "Zp"):
        code = ord(ch)
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return ch


def clean(value: object, limit: int = 200) -> str:
    text = str(value)
    cut = len(text) - limit
    shown = "".join(map(_escaped, text[:limit] if cut > 0 else text))
    return f"{shown}...(+{cut} chars)" if cut > 0 else shown
