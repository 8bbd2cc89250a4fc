"""report.html is safe to open: text from a spec is shown, never run (issue 17)."""

from __future__ import annotations

import re
from pathlib import Path

from day0.report import write_report
from day0.runs import RunContext
from day0.spec import spec_from_dict

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"


def test_script_in_a_spec_is_not_live_in_the_report(tmp_path: Path) -> None:
    platform = {
        "name": f"cpu{IMG}",
        "device_type": "cpu",
        "hardware": {"memory_gib": 1, "bf16_tflops": 1, "intra_node_bandwidth_gbps": 1, "inter_node_bandwidth_gbps": 1},
    }
    spec = spec_from_dict(
        {
            "metadata": {"name": "xss", "labels": {"team": SCRIPT}},
            "model": f"m{SCRIPT}",
            "platform": platform,
            "storage": f"file://{tmp_path}/store",
        }
    )
    ctx = RunContext.create(spec)
    ctx.begin_attempt()
    urls = write_report(ctx, 0.0, ["analyze"])
    page = Path(urls["html"].removeprefix("file://")).read_text()
    assert not re.search(r"<\s*script", page, re.IGNORECASE), "a live <script> element"
    assert not re.search(r"<\s*img[^>]*onerror", page, re.IGNORECASE), "a live event handler"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, "the model source is shown as text"
    csp = re.search(r"<meta http-equiv='Content-Security-Policy' content=\"([^\"]+)\">", page)
    assert csp and "default-src 'none'" in csp[1] and "script-src" not in csp[1], "a strict CSP, no script source"
    assert page.index("Content-Security-Policy") < page.index("<body>"), "the policy is in the head"
