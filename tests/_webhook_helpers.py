"""Shared by the webhook tests: commit shas, a watch config in a temp dir, flow runs read back from the
real Prefect server, and the receiver's metrics."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testsupport.webhook import Receiver

Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def new_sha() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:8]


def write_watch(root: Path, orgs: list[str], deployment: str = "adapt/release", **watch: Any) -> Path:
    """watch.yaml + template.yaml under `root` (a spec template that runs step 1 into `root`/runs)."""
    template = {
        "metadata": {"name": "release"},
        "model": {"source": "hf://placeholder/placeholder"},
        "platform": "cpu",
        "steps": ["analyze"],
        "storage": f"file://{root}/runs",
    }
    (root / "template.yaml").write_text(yaml.safe_dump(template))
    config = {"watch": {"orgs": orgs, **watch}, "template": "template.yaml", "deployment": deployment}
    (root / "watch.yaml").write_text(yaml.safe_dump(config))
    return root / "watch.yaml"


def runs_of(deployment: str, sha: str | None = None) -> list[Any]:
    """Flow runs of `deployment` (every page), those whose spec pins `sha` when given."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async def read() -> list[Any]:
        async with get_client() as client:
            dep = await client.read_deployment_by_name(deployment)
            found: list[Any] = []
            while page := await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])), limit=200, offset=len(found)
            ):
                found += page
            return found

    runs = asyncio.run(read())
    return [r for r in runs if sha is None or pinned_source(r.parameters).endswith("@" + sha)]


def pinned_source(parameters: dict[str, Any]) -> str:
    """The model source of a run's inline spec (`model` a mapping, or the source alone); "" for a run given
    a spec path (other tests on the shared server start those, and they pin no commit)."""
    spec = parameters.get("spec")
    model = spec.get("model") if isinstance(spec, dict) else None
    return model.get("source", "") if isinstance(model, dict) else model if isinstance(model, str) else ""


def wait_runs(deployment: str, sha: str, timeout_s: float = 60, settle_s: float = 1.0) -> list[Any]:
    """The runs pinning `sha` once there is at least one (then `settle_s` more, so a second would show)."""
    deadline = time.monotonic() + timeout_s
    while not runs_of(deployment, sha):
        assert time.monotonic() < deadline, f"no flow run for {sha} within {timeout_s} s"
        time.sleep(0.5)
    time.sleep(settle_s)
    return runs_of(deployment, sha)


def metrics(rx: Receiver) -> Metrics:
    text = httpx.get(rx.url + "/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def delta(before: Metrics, after: Metrics, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)
