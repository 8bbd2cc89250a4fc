"""The Day-0 scorecard: one row per validation layer (numerical, plan, convergence, application),
each with its verdict, a glance of its numbers and, folded beneath, every other figure and reason.

A row is PASS only if its checks ran: a row some of whose steps did not run, or whose step could not
make a check here (`Judgement.unproven`: step 1's probe with no device to run a kernel on), reads
INCOMPLETE where it would have read PASS, and says what did not run first in its glance and reasons.
A row that failed leads its glance with what failed first (its first failing step's first reason),
before the figures that passed.

A row's glance is the first `GLANCE` figures of each of its steps' headlines (each result puts its
telling figures first); a later step's figure of the same name supersedes an earlier one's
(optimize's memory over parallel's). The Markdown row keeps its reasons in a column (Prefect's
artifact shows it); the HTML row folds them into `<details>`.
"""

from __future__ import annotations

from typing import NamedTuple

from markdown_it import MarkdownIt

from day0.core.result import StepResult, worst
from day0.report.text import inert
from day0.runs.context import StepRecord
from day0.steps.registry import REGISTRY, scorecard

__all__ = [
    "GLANCE",
    "MARK",
    "SCORECARD",
    "Row",
    "badge",
    "first_failure",
    "outcome",
    "rows",
    "scorecard_html",
    "scorecard_markdown",
]

# (row, the steps behind it): numerical, plan, convergence, application, in pipeline order; a sub-step
# (step 3's calibration) counts in its parent's row when it ran.
SCORECARD: tuple[tuple[str, tuple[str, ...]], ...] = scorecard(substeps=True)
GLANCE = 2  # figures per step shown at a glance
MARK = {
    "pass": "PASS",
    "warn": "WARN",
    "fail": "**FAIL**",
    "skipped": "skipped",
    "error": "**ERROR**",
    "incomplete": "INCOMPLETE",
    "not run": "not run",
}
_INCIDENTS = ("node-lost", "pod-lost", "pod-replaced", "recovered", "job-resubmitted")


class Row(NamedTuple):
    layer: str
    verdict: str  # a key of MARK
    glance: list[tuple[str, str]]
    more: list[tuple[str, str]]
    reasons: list[str]


def outcome(record: StepRecord | None) -> str:
    if record is None:
        return "not run"
    return "error" if record.status == "failed" else (record.verdict or "error")


def _reasons(record: StepRecord) -> list[str]:
    return record.reasons or ([record.error] if record.error else [])


def _incidents(steps: tuple[str, ...], results: dict[str, StepResult]) -> list[tuple[str, str]]:
    """The cluster's failure events while the row's steps ran, counted by kind."""
    executions = [x for s in steps if (r := results.get(s)) and (x := r.execution)]
    kinds = [e.kind for x in executions for e in x.events if e.kind in _INCIDENTS]
    return [("cluster", ", ".join(f"{kinds.count(k)} {k}" for k in _INCIDENTS if k in kinds))] if kinds else []


def first_failure(steps: tuple[str, ...], records: dict[str, StepRecord]) -> tuple[str, str] | None:
    """("failed first", "step: its first reason") for the first of `steps` that failed or raised."""
    for s in steps:
        if s in records and outcome(records[s]) in ("fail", "error"):
            reasons = _reasons(records[s])
            return "failed first", f"{s}: {reasons[0] if reasons else 'failed'}"
    return None


def _unchecked(steps: tuple[str, ...], records: dict[str, StepRecord], results: dict[str, StepResult]) -> list[str]:
    """What the row's checks left undone: its steps that did not run, and checks a step could not make."""
    out = [f"{s}: not run" for s in steps if s not in records and s in REGISTRY]  # a sub-step runs when asked
    return out + [f"{s}: {u}" for s in steps if s in records and (r := results.get(s)) for u in r.judge().unproven]


def rows(records: dict[str, StepRecord], results: dict[str, StepResult]) -> list[Row]:
    out = []
    for layer, steps in SCORECARD:
        outcomes = [outcome(records.get(s)) for s in steps if s in records]
        if not outcomes:
            out.append(Row(layer, "not run", [], [], []))
            continue
        verdict: str = "error" if "error" in outcomes else worst(*outcomes)  # type: ignore[arg-type]  # "error" ruled out: verdicts
        unchecked = _unchecked(steps, records, results)
        if verdict == "pass" and unchecked:
            verdict = "incomplete"  # a row is PASS only if its checks ran
        merged: dict[str, str] = {}
        lead: list[str] = []
        for s in steps:
            headline = r.headline if (r := results.get(s)) else {}
            merged.update(headline)
            lead += [k for k in list(headline)[:GLANCE] if k not in lead]
        first = first_failure(steps, records)
        glance = [first] if first else [("unchecked", "; ".join(unchecked))] if unchecked else []
        glance += [(k, merged[k]) for k in lead] + _incidents(steps, results)
        more = [(k, v) for k, v in merged.items() if k not in lead]
        reasons = [f"{s}: {reason}" for s in steps if s in records for reason in _reasons(records[s])]
        out.append(Row(layer, verdict, glance, more, reasons + [u for u in unchecked if u not in reasons]))
    return out


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no live link or image (`inert`), no cell break."""
    return inert(text).replace("|", "\\|").replace("\n", " ")


def scorecard_markdown(table: list[Row]) -> list[str]:
    lines = ["| layer | verdict | headline | reasons |", "|---|---|---|---|"]
    for r in table:
        figures = "; ".join(f"{k}: {v}" for k, v in r.glance)
        lines.append(f"| {r.layer} | {MARK[r.verdict]} | {_cell(figures)} | {_cell('; '.join(r.reasons))} |")
    return lines


def badge(verdict: str) -> str:
    word = MARK[verdict].strip("*")
    return f'<span class="badge {verdict.replace(" ", "")}">{word}</span>'


def _details(r: Row, inline: MarkdownIt) -> str:
    parts = [f"{len(r.reasons)} reason{'s' * (len(r.reasons) != 1)}"] if r.reasons else []
    parts += [f"{len(r.more)} more figure{'s' * (len(r.more) != 1)}"] if r.more else []
    if not parts:
        return ""
    reasons = "".join(f"<li>{_inline(inline, x)}</li>" for x in r.reasons)
    figures = "".join(f"<li>{_inline(inline, k)}: {_inline(inline, v)}</li>" for k, v in r.more)
    return (
        f"<details><summary>{', '.join(parts)}</summary>"
        + (f'<ul class="reasons">{reasons}</ul>' if reasons else "")
        + (f'<ul class="figures">{figures}</ul>' if figures else "")
        + "</details>"
    )


def _inline(inline: MarkdownIt, text: str) -> str:
    """`text` as inline HTML: code spans work; links and images in it stay text (`inert`)."""
    return inline.renderInline(inert(text))


def scorecard_html(table: list[Row]) -> str:
    """The scorecard as an HTML table: every text rendered as inline Markdown with raw HTML off
    (code spans work, markup, links and images from a spec or a model config are shown as text)."""
    inline = MarkdownIt("commonmark", {"html": False})
    body = []
    for r in table:
        glance = " · ".join(
            f'<span class="fig">{_inline(inline, k)} <b>{_inline(inline, v)}</b></span>' for k, v in r.glance
        )
        body.append(
            f'<tr><td>{_inline(inline, r.layer)}</td><td>{badge(r.verdict)}</td><td><div class="glance">'
            f"{glance or '-'}</div>{_details(r, inline)}</td></tr>"
        )
    return (
        '<table class="scorecard"><colgroup><col class="layer"><col class="verdict"><col></colgroup>'
        "<thead><tr><th>layer</th><th>verdict</th><th>headline</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )
