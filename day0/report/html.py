"""report.html: one self-contained page (inline style, plots as data: images, no script) from the
report's Markdown pieces and the scorecard's own HTML.

Markdown is rendered with raw HTML off, so text from a spec or a model config is shown, never run;
a strict Content-Security-Policy backs that up. Only `day0.report.text.PLOT` lines become images
(the plots the steps wrote); every other text reached the Markdown through `inert`.

Verdict cells become coloured badges; tables longer than `_FOLD_ROWS` fold into `<details>`; no
table grows wider than the text column: long words break where a line would overflow, and a table
still too wide scrolls inside its own box, never the page (tests/unit/report/test_browser.py checks the
default run's report has none).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Sequence

from markdown_it import MarkdownIt

from day0.report.scorecard import badge
from day0.report.text import PLOT

__all__ = ["page"]

_FOLD_ROWS = 12  # HTML tables longer than this fold into <details>
_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:1.2em auto;padding:0 1em;color:#222}
body{line-height:1.35}h1{font-size:1.55em;margin:.2em 0 .4em}h2{font-size:1.3em;margin:1em 0 .4em}
table{border-collapse:collapse;margin:.6em 0 1em;display:block;max-width:100%;overflow-x:auto}
td,th{border:1px solid #ccc;padding:3px 6px;font-size:86%;vertical-align:top;overflow-wrap:break-word}
th{background:#f4f4f4}code{background:#f4f4f4;padding:1px 3px}
img{max-width:100%;height:auto}pre{overflow-x:auto}summary{cursor:pointer;color:#555;font-size:92%}
.badge{display:inline-block;min-width:4.2em;text-align:center;padding:1px 6px;border-radius:4px;font-weight:600;
font-size:85%;color:#fff;background:#6e7781}.badge.pass{background:#1a7f37}.badge.warn{background:#9a6700}
.badge.fail,.badge.error{background:#cf222e}.badge.incomplete{background:#bc4c00}
table.scorecard{display:table;width:100%;table-layout:fixed}.scorecard col.layer{width:11em}
.scorecard col.verdict{width:6.5em}.scorecard .fig{white-space:normal}.scorecard ul{margin:.3em 0;padding-left:1.2em}
.scorecard details{margin-top:.2em}.scorecard ul.figures{color:#555}"""
# No script, no fetches, no forms: only the report's own inline style and its data: images.
_CSP = (
    "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
    "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">"
)
# verdict cells as Markdown renders them (MARK), made badges; "skipped" stays text: op tables use the word too
_RENDERED = {"PASS": "pass", "WARN": "warn", "<strong>FAIL</strong>": "fail", "<strong>ERROR</strong>": "error"}
_VERDICT_CELL = re.compile("<td>(" + "|".join(re.escape(v) for v in _RENDERED) + ")</td>")
_TITLE = re.compile("<h1>(.*): (" + "|".join(re.escape(v) for v in _RENDERED) + ")</h1>")


def _badges(body: str) -> str:
    body = _VERDICT_CELL.sub(lambda m: f"<td>{badge(_RENDERED[m[1]])}</td>", body)
    return _TITLE.sub(lambda m: f"<h1>{m[1]}: {badge(_RENDERED[m[2]])}</h1>", body, count=1)


_CODE = re.compile(r"<code>([^<]*)</code>")
_JOINT = re.compile(r"(::|[._])(?=\w)")


def _break_points(body: str) -> str:
    """Code spans (op names, module paths) may break after `::`, `.` and `_` before a word character:
    a table column then narrows to a name's longest part, not its whole length. `<wbr>` adds no
    character, and escaped markup (`&lt;`...) holds none of these, so nothing is split inside it."""
    return _CODE.sub(lambda m: "<code>" + _JOINT.sub(r"\1<wbr>", m[1]) + "</code>", body)


def _fold_long_tables(body: str) -> str:
    def fold(m: re.Match[str]) -> str:
        rows = m.group(0).count("<tr>") - 1
        return (
            m.group(0)
            if rows <= _FOLD_ROWS
            else f"<details><summary>table: {rows} rows</summary>{m.group(0)}</details>"
        )

    return re.sub(r"<table>.*?</table>", fold, body, flags=re.S)


def page(title: str, pieces: Sequence[tuple[str, str]], image: Callable[[str], bytes | None]) -> str:
    """The page from `pieces`, each ("md", Markdown) or ("html", markup built here, escaped already);
    `image(path)` gives the bytes of a `PLOT` line's file (None: leave the line as it is)."""

    def embed(m: re.Match[str]) -> str:
        data = image(m.group(2))
        return (
            m.group(0) if data is None else f"![{m.group(1)}](data:image/png;base64,{base64.b64encode(data).decode()})"
        )

    # html=False: text from the spec or a model config is shown, never run as markup
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = "".join(
        _fold_long_tables(_break_points(_badges(md.render(PLOT.sub(embed, text))))) if kind == "md" else text
        for kind, text in pieces
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{_CSP}<title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>{body}</body></html>\n"
    )
