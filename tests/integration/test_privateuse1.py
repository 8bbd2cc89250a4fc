"""A real PrivateUse1 device (tests/fixtures/privateuse1: `openreg`, loaded by torch's own backend
autoload from PYTHONPATH, as a vendor plugin is) and day0's device path run on it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.paths import REPO
from tests.fixtures.privateuse1 import ABSENT_OPS, WRONG_DTYPE, WRONG_OP

pytestmark = pytest.mark.integration

PLATFORM = REPO / "tests" / "data" / "platforms" / "openreg.yaml"


def _python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)


_DEVICE_BASICS = """
import json, torch
x = torch.randn(4, 6)
d = x.to("openreg")
before = torch.openreg.memory_allocated()
view = d.view(24)[2:5]
view.add_(1.0)                                   # in place, through a view: writes the device tensor
lin = torch.nn.Linear(6, 3).to("openreg")
lin(d).square().sum().backward()
try:
    torch.rsqrt(d)
    absent = ""
except NotImplementedError as e:
    absent = str(e).splitlines()[0]
f = torch.nn.functional.silu
silu = {dt: (f(x.to(dt).to("openreg")).cpu() - f(x.to(dt))).abs().max().item() for dt in (torch.float, torch.bfloat16)}
print(json.dumps({
    "device": str(d.device), "available": torch.openreg.is_available(), "count": torch.openreg.device_count(),
    "round_trip": torch.equal(d.cpu()[1:], x[1:]), "view_wrote": torch.equal(d.cpu()[0, 2:5], x[0, 2:5] + 1),
    "grad_device": str(lin.weight.grad.device), "memory": [before, torch.openreg.max_memory_allocated()],
    "absent": absent, "silu_error": {str(k): v for k, v in silu.items()},
}))
"""


def test_backend_is_a_privateuse1_device_loaded_by_torch_autoload(openreg: dict[str, str]) -> None:
    done = _python(_DEVICE_BASICS, openreg)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["device"] == "openreg:0" and got["available"] and got["count"] >= 1
    assert got["round_trip"] and got["view_wrote"], "copies and views act on the device memory"
    assert got["grad_device"] == "openreg:0"
    assert 0 < got["memory"][0] <= got["memory"][1]
    assert "Could not run 'aten::rsqrt" in got["absent"]
    assert got["silu_error"]["torch.float32"] == 0.0 and got["silu_error"]["torch.bfloat16"] > 0.0


def test_without_the_folder_on_pythonpath_there_is_no_device(openreg: dict[str, str]) -> None:
    plain = {k: v for k, v in openreg.items() if k != "PYTHONPATH"}
    done = _python("import torch; print(hasattr(torch, 'openreg'))", plain)
    assert done.stdout.strip() == "False"


def test_step1_probe_finds_exactly_the_absent_ops(openreg: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "analyze", "tiny-qwen3-moe", "--platform", str(PLATFORM), "--json"],
        env=openreg,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    coverage = json.loads(done.stdout)["coverage"]
    assert coverage["method"] == "probe"
    missing = {o["op"] for o in coverage["ops"] if o["status"] in ("missing", "dtype_unsupported")}
    assert missing == ABSENT_OPS


_STEP2 = """
import json, sys
from day0.spec.pipeline import ModelSpec, load_platform
from day0.steps.analyze.run import analyze_model
from day0.steps.operators.job import OperatorsRequest, run_request
from day0.steps.operators.layers import WholeModel
platform = load_platform(sys.argv[1])
analyzed = analyze_model(ModelSpec(source="tiny-qwen3-moe"), platform, "bf16")
request = OperatorsRequest(inventory=analyzed.inventory, platform=platform, compute_dtype="bf16",
                           whole_model=WholeModel.from_analysis(analyzed))
silu = next(r for r in analyzed.inventory.ops if r.op == "aten::silu")
print(json.dumps({"result": json.loads(run_request(request).model_dump_json()), "silu_modules": silu.modules}))
"""


def test_step2_on_the_device_adapts_the_absent_ops_and_catches_the_wrong_kernel(openreg: dict[str, str]) -> None:
    done = _python(_STEP2, openreg, str(PLATFORM))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    result, ops = got["result"], got["result"]["ops"]
    assert ops["platform"] == "openreg" and ops["emulated_on"] is None, "checked on the device, not emulated"
    adapted = {a["op"]: a for a in ops["adaptations"]}
    for op in ABSENT_OPS:  # the dispatcher's "could not run" is day0's missing kernel, then adapted and rechecked
        assert adapted[op]["cause"] == "missing", adapted[op]["problem"]
        assert adapted[op]["strategy"] and adapted[op]["recheck"]["status"] == "pass"
    assert adapted[WRONG_OP]["cause"] == "wrong_numbers" and adapted[WRONG_OP]["dtype"] == WRONG_DTYPE
    wrong = f"{WRONG_OP} at {WRONG_DTYPE}: the platform's kernel gives wrong numbers"
    assert any(r.startswith(wrong) for r in result["reasons"])
    assert got["silu_modules"], "step 1 says which modules run the wrong op"
    assert result["verdict"] == "fail", "a wrong platform kernel fails step 2 even when worked around"
    proven = {c["op"] for c in ops["checks"] if c["status"] == "pass" and c["dtype"] == "bf16"}
    assert {"aten::mm", "aten::silu"} <= proven and ops["compute_dtypes"] == ["bf16"]
    step = result["training_step"]
    assert step["error"] is None and step["loss_platform"] is not None, "the trial's step ran on the device"
    assert step["kernel_calls"].get("stock", 0) > 0 and any(k.startswith("adapt:") for k in step["kernel_calls"])
