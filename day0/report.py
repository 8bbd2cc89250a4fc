"""The run report: one Markdown and one self-contained HTML file per run, written to the run's
folder in the artifact store. It opens with the Day-0 scorecard (the three validation layers and
the plan, each with its verdict and headline numbers), then every step's section, linking its
result and embedding its plots. Written on every path, also when a step raised.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from typing import Any

from markdown_it import MarkdownIt

from day0.core.result import worst
from day0.runs import RunContext, StepRecord

__all__ = ["SCORECARD", "write_report"]

# (row, the steps behind it): numerical, plan, convergence, application, in pipeline order.
SCORECARD: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("numerical (steps 1-2)", ("analyze", "operators")),
    ("plan (steps 3-4)", ("parallel", "optimize")),
    ("convergence (step 5)", ("trial",)),
    ("application (step 6)", ("inference",)),
)
_FOLD_ROWS = 12  # HTML tables longer than this fold into <details>
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")
_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;font-size:90%}
th{background:#f4f4f4}code{background:#f4f4f4;padding:1px 3px}img{max-width:100%}summary{cursor:pointer}"""
_MARK = {
    "pass": "PASS",
    "warn": "WARN",
    "fail": "**FAIL**",
    "skipped": "skipped",
    "error": "**ERROR**",
    "not run": "not run",
}


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _results(ctx: RunContext, records: list[StepRecord]) -> dict[str, dict[str, Any]]:
    store, out = ctx.store(), {}
    for r in records:
        key = ctx.key(r.step, "result.json")
        if r.status in ("executed", "cached") and store.exists(key):
            out[r.step] = store.get_json(key)
    return out


def _outcome(record: StepRecord | None) -> str:
    if record is None:
        return "not run"
    return "error" if record.status == "failed" else (record.verdict or "error")


def _reasons(record: StepRecord) -> list[str]:
    return record.reasons or ([record.error] if record.error else [])


def _scorecard(records: dict[str, StepRecord], results: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| layer | verdict | headline | reasons |", "|---|---|---|---|"]
    for row, steps in SCORECARD:
        outcomes = [_outcome(records.get(s)) for s in steps if s in records]
        if not outcomes:
            lines.append(f"| {row} | not run | | |")
            continue
        verdict = "error" if "error" in outcomes else worst(*outcomes)  # type: ignore[arg-type]  # "error" ruled out: verdicts
        merged: dict[str, str] = {}
        for s in steps:  # a later step's figure supersedes an earlier one's (optimize's memory over parallel's)
            merged.update(results.get(s, {}).get("headline", {}))
        figures = [f"{k}: {v}" for k, v in merged.items()] + _incidents(steps, results)
        reasons = [f"{s}: {reason}" for s in steps if s in records for reason in _reasons(records[s])]
        lines.append(f"| {row} | {_MARK[verdict]} | {_cell('; '.join(figures))} | {_cell('; '.join(reasons))} |")
    return lines


_INCIDENTS = ("node-lost", "pod-lost", "pod-replaced", "recovered")


def _incidents(steps: tuple[str, ...], results: dict[str, dict[str, Any]]) -> list[str]:
    """The cluster's failure events while the row's steps ran, counted by kind."""
    kinds = [
        e["kind"]
        for s in steps
        for e in ((results.get(s, {}).get("execution") or {}).get("events") or [])
        if e["kind"] in _INCIDENTS
    ]
    return [f"cluster: {', '.join(f'{kinds.count(k)} {k}' for k in _INCIDENTS if k in kinds)}"] if kinds else []


def _execution(results: dict[str, dict[str, Any]]) -> list[str]:
    """Where each step's work ran, and every event of the cluster meanwhile, with UTC times."""
    runs = [(step, r["execution"]) for step, r in results.items() if r.get("execution")]
    if not runs:
        return []
    lines = ["## Where the steps ran", "", "| step | backend | cluster | Ray job | seconds |", "|---|---|---|---|---:|"]
    for step, x in runs:
        took = f"{x['duration_s']:.1f}" if x.get("duration_s") is not None else ""
        lines.append(
            f"| {step} | {x['backend']} | {_cell(x.get('cluster') or 'this process')} | "
            f"{_cell(x.get('job_id') or '-')} | {took} |"
        )
    events = [(step, e) for step, x in runs for e in x.get("events") or []]
    if events:
        lines += ["", "| time (UTC) | step | event | where | message |", "|---|---|---|---|---|"]
        for step, e in sorted(events, key=lambda se: se[1]["at"]):
            when = dt.datetime.fromtimestamp(e["at"], dt.UTC).strftime("%H:%M:%S")
            where = " ".join(f"{k} {e[k]}" for k in ("pool", "node", "pod") if e.get(k))
            lines.append(f"| {when} | {step} | {e['kind']} | {_cell(where)} | {_cell(e.get('message') or '')} |")
    return [*lines, ""]


def _header(ctx: RunContext, records: list[StepRecord], results: dict[str, dict[str, Any]], wall_s: float) -> list[str]:
    spec, manifest = ctx.spec, ctx.load_manifest()
    outcomes = [_outcome(r) for r in records]
    overall = "error" if "error" in outcomes else worst(*outcomes)  # type: ignore[arg-type]  # "error" ruled out: verdicts
    model = results.get("analyze", {}).get("model", {})
    revision = " @ ".join(x for x in (model.get("revision"), model.get("commit")) if x) or "local files"
    pools = (
        ", ".join(
            f"{p.name} ({p.max_nodes} x {p.accelerator.per_node} {p.accelerator.resource})"
            for p in spec.cluster.node_pools
        )
        or "this machine"
    )
    return [
        f"# day0 report: {spec.metadata.name}: {_MARK[overall]}",
        "",
        "| | |",
        "|---|---|",
        f"| model | `{_cell(spec.model.source)}` ({_cell(revision)}) |",
        f"| platform | `{spec.platform.name}` (device {spec.platform.device_type}, "
        f"{spec.platform.distributed_backend}) |",
        f"| cluster | {spec.cluster.backend} backend: {_cell(pools)} |",
        f"| wall time | {wall_s:.1f} s (attempt {len(manifest.attempts)}) |",
        f"| run | `{ctx.run_id}`, store `{_cell(ctx.store().url(ctx.prefix))}` |",
        "",
    ]


def _steps_table(records: list[StepRecord], planned: list[str]) -> list[str]:
    lines = ["| step | verdict | ran | seconds | code |", "|---|---|---|---:|---|"]
    for r in records:
        ran = {"cached": "reused (completed earlier by this code)", "failed": "raised"}.get(r.status, r.status)
        lines.append(f"| {r.step} | {_MARK[_outcome(r)]} | {ran} | {r.seconds:.1f} | {r.code or '-'} |")
    seen = {r.step for r in records}
    lines += [f"| {step} | not run | interrupted before it started | | |" for step in planned if step not in seen]
    errors = [f"- `{r.step}` raised: {_cell(r.error)}" for r in records if r.error]
    return lines + (["", *errors] if errors else [])


def _step_sections(ctx: RunContext, records: list[StepRecord]) -> list[str]:
    store, sections = ctx.store(), []
    for r in records:
        key = ctx.key(r.step, "result.md")
        if r.status not in ("executed", "cached") or not store.exists(key):
            continue
        body = store.get_bytes(key).decode()

        def _link(m: re.Match[str], step: str = r.step) -> str:
            return f"![{m.group(1)}]({step}/{m.group(2)})"

        body = _IMAGE.sub(_link, body)
        body = re.sub(r"^(#+) ", r"#\1 ", body, flags=re.M)  # each step's headings one level down
        sections.append(f"{body}\n[result.json]({r.step}/result.json) · [result.md]({r.step}/result.md)\n")
    return sections


def _fold_long_tables(body: str) -> str:
    def fold(m: re.Match[str]) -> str:
        rows = m.group(0).count("<tr>") - 1
        return (
            m.group(0)
            if rows <= _FOLD_ROWS
            else f"<details><summary>table: {rows} rows</summary>{m.group(0)}</details>"
        )

    return re.sub(r"<table>.*?</table>", fold, body, flags=re.S)


# No script, no fetches, no forms: only the report's own inline style and its data: images.
_CSP = (
    "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
    "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">"
)


def _html(ctx: RunContext, markdown: str) -> str:
    store = ctx.store()

    def embed(m: re.Match[str]) -> str:
        key = ctx.key(m.group(2))
        if not store.exists(key):
            return m.group(0)
        return f"![{m.group(1)}](data:image/png;base64,{base64.b64encode(store.get_bytes(key)).decode()})"

    # html=False: text from the spec or a model config is shown, never run as markup
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(_IMAGE.sub(embed, markdown))
    title = html.escape(f"day0 report: {ctx.spec.metadata.name}")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{_CSP}<title>{title}</title><style>{_CSS}</style></head>"
        f"<body>{_fold_long_tables(body)}</body></html>\n"
    )


def write_report(ctx: RunContext, wall_s: float, planned: list[str]) -> dict[str, str]:
    """Write report.md and report.html for the run's latest attempt (`planned`: the steps it was
    to run, so those never reached show as not run); return their URLs."""
    records = ctx.attempt_records()
    results = _results(ctx, records)
    by_step = {r.step: r for r in records}
    lines = [*_header(ctx, records, results, wall_s), "## Day-0 scorecard", "", *_scorecard(by_step, results)]
    lines += ["", "## Steps", "", *_steps_table(records, planned), "", *_execution(results)]
    markdown = "\n".join(lines) + "\n" + "\n".join(_step_sections(ctx, records))
    store = ctx.store()
    return {
        "markdown": store.put_text(ctx.key("report.md"), markdown, "text/markdown"),
        "html": store.put_text(ctx.key("report.html"), _html(ctx, markdown), "text/html"),
    }
