"""The run report: one Markdown and one self-contained HTML file per run, linking every step's
result and embedding its plots, written to the run's folder in the artifact store."""

from __future__ import annotations

import base64
import html
import re

from markdown_it import MarkdownIt

from day0.runs import RunContext

__all__ = ["write_report"]

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")
_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;font-size:90%}
th{background:#f4f4f4}code{background:#f4f4f4;padding:1px 3px}img{max-width:100%}"""


def _step_sections(ctx: RunContext, steps: list[str]) -> list[str]:
    store, sections = ctx.store(), []
    for step in steps:
        key = ctx.key(step, "result.md")
        if not store.exists(key):
            continue
        body = store.get_bytes(key).decode()
        body = _IMAGE.sub(lambda m: f"![{m.group(1)}]({step}/{m.group(2)})", body)
        body = re.sub(r"^(#+) ", r"#\1 ", body, flags=re.M)  # each step's headings one level down
        sections.append(f"{body}\n[result.json]({step}/result.json) · [result.md]({step}/result.md)\n")
    return sections


def _summary(ctx: RunContext, notes: list[str]) -> str:
    manifest = ctx.load_manifest()
    attempt = manifest.attempts[-1] if manifest.attempts else []
    lines = [f"# day0 report: {ctx.spec.metadata.name}", "",
             f"- model: `{ctx.spec.model.source}` on platform `{ctx.spec.platform.name}` "
             f"({ctx.spec.cluster.backend} backend)",
             f"- run id: `{ctx.run_id}` (attempt {len(manifest.attempts)}), store: `{ctx.store().url(ctx.prefix)}`",
             "", "| step | status | seconds |", "|---|---|---:|"]
    lines += [f"| {r.step} | {r.status}{' — ' + r.error if r.error else ''} | {r.seconds:.1f} |" for r in attempt]
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _html(ctx: RunContext, markdown: str) -> str:
    store = ctx.store()

    def embed(m: re.Match[str]) -> str:
        key = ctx.key(m.group(2))
        if not store.exists(key):
            return m.group(0)
        data = base64.b64encode(store.get_bytes(key)).decode()
        return f"![{m.group(1)}](data:image/png;base64,{data})"

    body = MarkdownIt("commonmark").enable("table").render(_IMAGE.sub(embed, markdown))
    title = html.escape(f"day0 report: {ctx.spec.metadata.name}")
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{_CSS}</style></head>" \
           f"<body>{body}</body></html>\n"


def write_report(ctx: RunContext, steps: list[str], notes: list[str] | None = None) -> dict[str, str]:
    """Write report.md and report.html for the run; return their URLs."""
    markdown = _summary(ctx, notes or []) + "\n" + "\n".join(_step_sections(ctx, steps))
    store = ctx.store()
    return {"markdown": store.put_text(ctx.key("report.md"), markdown, "text/markdown"),
            "html": store.put_text(ctx.key("report.html"), _html(ctx, markdown), "text/html")}
