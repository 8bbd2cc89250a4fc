"""Text that enters the report: what may become an image, and how everything else is kept inert.

Contract: only a `PLOT` line is ever embedded or linked as a plot: a line of its own,
`![alt](<step>/<file>.png)`, one step folder and a plain file name (no `..`, no absolute path, no
deeper folder). The report writer makes those lines from each step's own result.md (a line that is
exactly `![alt](file.png)`, `OWN_PLOT`); every other text that enters the report's Markdown (a
spec's names, a step's reasons, errors, a model config's fields) passes `inert` first, so
`![x](../../other-run/plot.png)` in it is shown as written, never embedded nor linked.
"""

from __future__ import annotations

import re

__all__ = ["OWN_PLOT", "PLOT", "PLOT_NAME", "inert"]

# A plot's file name as a step writes it beside its result: no folder, no leading dot (so no `..`).
PLOT_NAME = r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}\.png"
# A plot line of the report: `![alt](step/name.png)` alone on its line.
PLOT = re.compile(rf"^!\[([^\]\n]*)\]\(([a-z]+/{PLOT_NAME})\)$", re.M)
# A plot line as a step writes it in its own result.md: the file beside the result.
OWN_PLOT = re.compile(rf"^!\[([^\]\n]*)\]\(({PLOT_NAME})\)$")


def inert(text: str) -> str:
    """`text` with no live Markdown link or image: `](` becomes `]\\(`, which renders as written
    (the backslash escapes the parenthesis; it is never itself escaped, since `]` precedes it)."""
    return text.replace("](", "]\\(")
