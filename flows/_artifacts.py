"""What a flow run shows in the Prefect UI beside its logs: a link artifact to the run's report and
the scorecard (the report's head, down to its step table) as a Markdown artifact, both keyed by the
spec's name, so each name's history of reports reads as one artifact's versions."""

from __future__ import annotations

import re

from prefect.artifacts import create_link_artifact, create_markdown_artifact

from day0.runs.context import RunContext

__all__ = ["artifact_key", "publish_report_artifacts", "scorecard_of"]

_STEPS_HEADING = "\n## Steps\n"


def artifact_key(kind: str, name: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", f"{kind}-{name}".lower())).strip("-")[:100]


def scorecard_of(report_markdown: str) -> str:
    """The report's head: its title with the overall verdict, the run table and the scorecard."""
    return report_markdown.split(_STEPS_HEADING, 1)[0].rstrip() + "\n"


def publish_report_artifacts(ctx: RunContext, report: dict[str, str]) -> None:
    name = ctx.spec.metadata.name
    create_link_artifact(
        key=artifact_key("report", name),
        link=report["html"],
        link_text=f"day0 report: {name} ({ctx.prefix})",
        description=f"The run's report (HTML; Markdown beside it: {report['markdown']})",
    )
    markdown = ctx.store.get_bytes(ctx.key("report.md")).decode()
    create_markdown_artifact(
        key=artifact_key("scorecard", name),
        markdown=scorecard_of(markdown) + f"\n[report]({report['html']})\n",
        description=f"Day-0 scorecard of {ctx.prefix}",
    )
