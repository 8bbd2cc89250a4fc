"""The pictures of docs/images/, made by the product rather than by hand (`make docs-images`):

- scorecard.png: the report of the default spec's recorded run (tests/data/report/tiny-local.jsonl,
  rendered by today's report code), its head as headless Chromium shows it;
- loss.png: step 5's loss plot of that run, drawn by the trial's plot module;
- coverage.png: `day0 analyze tiny-deepseek-v3 --platform ascend-910b --json`'s coverage, grouped by status;
- plan.png: `day0 plan` on the showcase spec: its summary, the ranked plans and the Megatron-LM arguments;
- bench-serving.png: the serving bench's curve from benchmarks/results.json.

Needs Chromium (`make browser`). The reference pages are text and come from scripts/gen_docs.py.
"""

import html
import io
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image

from day0.report.write import write_report
from tests.fixtures.browser import Page, chromium
from tests.fixtures.report import recorded_run

REPO = Path(__file__).resolve().parent.parent
IMAGES = REPO / "docs" / "images"
WIDTH = 1100
_PAGE = """<!doctype html><meta charset="utf-8"><style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1f2328; background: #fff; }}
pre {{ font: 12.5px/1.35 ui-monospace, monospace; margin: 0; white-space: pre-wrap; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #d0d7de; padding: 4px 8px; text-align: left;
vertical-align: top; }} th {{ background: #f6f8fa; }} h3 {{ margin: 0 0 8px; font-size: 15px; }}
</style>{body}"""
_HEIGHT = "Math.ceil(document.querySelector({selector}).getBoundingClientRect().bottom) + 16"


def _shot(browser: str, page_file: Path, selector: str = "'body'") -> bytes:
    """A screenshot of `page_file` down to the bottom of `selector`, as a small palette PNG."""
    with Page(browser, WIDTH, 2400) as page:
        page.open(page_file)
        bottom = int(page.evaluate(_HEIGHT.format(selector=selector)))
        shot = page.screenshot()
    image = Image.open(io.BytesIO(shot)).convert("RGB").crop((0, 0, WIDTH, min(bottom, 2400)))
    out = io.BytesIO()
    image.quantize(colors=128).save(out, "PNG", optimize=True)
    return out.getvalue()


def _html(tmp: Path, name: str, body: str) -> Path:
    path = tmp / f"{name}.html"
    path.write_text(_PAGE.format(body=body))
    return path


def _day0(*argv: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "110", "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as cwd:  # `day0 plan --out` writes there, not in the checkout
        done = subprocess.run(
            [sys.executable, "-m", "cli", *argv], cwd=cwd, env=env, capture_output=True, text=True, check=True
        )
    return done.stdout


def scorecard_and_loss(browser: str, tmp: Path) -> dict[str, bytes]:
    ctx, steps, wall_s = recorded_run(tmp)
    report = Path(write_report(ctx, wall_s, steps)["html"].removeprefix("file://"))
    loss = next(report.parent.rglob("loss.png")).read_bytes()
    return {"scorecard.png": _shot(browser, report, "'table.scorecard'"), "loss.png": loss}


def coverage(browser: str, tmp: Path) -> bytes:
    result = json.loads(_day0("analyze", "tiny-deepseek-v3", "--platform", "ascend-910b", "--json"))
    by_status: dict[str, list[str]] = defaultdict(list)
    for op in result["coverage"]["ops"]:
        by_status[op["status"]].append(op["op"].removeprefix("aten::"))
    sources = {op["status"]: op["source"] for op in result["coverage"]["ops"]}
    rows = "".join(
        f"<tr><td>{html.escape(status)}</td><td>{html.escape(sources.get(status, ''))}</td><td>{len(ops)}</td>"
        f"<td>{html.escape(', '.join(sorted(ops)[:24]) + (' ...' if len(ops) > 24 else ''))}</td></tr>"
        for status, ops in sorted(by_status.items(), key=lambda kv: -len(kv[1]))
    )
    title = "day0 analyze tiny-deepseek-v3 --platform ascend-910b: coverage of one training step's aten ops"
    body = f"<h3>{html.escape(title)}</h3><table><tr><th>status</th><th>source</th><th>ops</th><th>which</th></tr>"
    return _shot(browser, _html(tmp, "coverage", body + rows + "</table>"))


def plan(browser: str, tmp: Path) -> bytes:
    out = _day0("plan", str(REPO / "configs/pipelines/deepseek-v3-on-npu.yaml"), "--top", "3", "--out", "plan.yaml")
    lines = out.splitlines()
    head = lines[: lines.index(next(line for line in lines if line.startswith("## ")))]
    start = lines.index(next(line for line in lines if line.startswith("Megatron-LM")))
    end = lines.index("```", start + 3)
    text = "\n".join(["$ day0 plan configs/pipelines/deepseek-v3-on-npu.yaml --top 3", *head, "...", *lines[start:end]])
    return _shot(browser, _html(tmp, "plan", f"<pre>{html.escape(text)}</pre>"))


def bench_serving() -> bytes:
    curve = json.loads((REPO / "benchmarks/results.json").read_text())["benchmarks"]["serving"]["results"]
    points = curve["served_curve"]
    x = [p["concurrency"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), dpi=100)
    left.plot(x, [p["output_tok_s"] for p in points], marker="o")
    left.set(xlabel="concurrency", ylabel="output tokens/s", title="throughput")
    right.plot(x, [p["ttft_p99_ms"] for p in points], marker="o", label="p99 TTFT")
    right.plot(x, [p["tpot_p99_ms"] for p in points], marker="o", label="p99 TPOT")
    right.set(xlabel="concurrency", ylabel="ms", title="latency")
    right.legend()
    for ax in (left, right):
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()


def main() -> int:
    browser = chromium()
    if browser is None:
        print("no Chromium installed: run `make browser` first", file=sys.stderr)
        return 1
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        images = {
            **scorecard_and_loss(browser, tmp),
            "coverage.png": coverage(browser, tmp),
            "plan.png": plan(browser, tmp),
            "bench-serving.png": bench_serving(),
        }
    for name, data in images.items():
        (IMAGES / name).write_bytes(data)
        print(f"wrote docs/images/{name} ({len(data) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
