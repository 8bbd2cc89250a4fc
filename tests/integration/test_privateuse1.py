"""A real PrivateUse1 device (tests/fixtures/privateuse1: `openreg`, loaded by torch's own backend
autoload from PYTHONPATH, as a vendor plugin is) and day0's device path run on it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cli import day0
from tests.fixtures.paths import REPO
from tests.fixtures.privateuse1 import ABSENT_OPS, WRONG_DTYPE, WRONG_OP, backend_dir

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
with torch.autocast("openreg", dtype=torch.bfloat16):
    autocast = {"mm": str((d @ d.t()).dtype), "log_softmax": str(torch.log_softmax(d.bfloat16(), -1).dtype)}
print(json.dumps({
    "device": str(d.device), "available": torch.openreg.is_available(), "count": torch.openreg.device_count(),
    "round_trip": torch.equal(d.cpu()[1:], x[1:]), "view_wrote": torch.equal(d.cpu()[0, 2:5], x[0, 2:5] + 1),
    "grad_device": str(lin.weight.grad.device), "memory": [before, torch.openreg.max_memory_allocated()],
    "absent": absent, "silu_error": {str(k): v for k, v in silu.items()}, "autocast": autocast,
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
    # the device's autocast policy (torch's shared lists, as CUDA's): GEMMs at bf16, log_softmax at fp32
    assert got["autocast"] == {"mm": "torch.bfloat16", "log_softmax": "torch.float32"}


def test_without_the_folder_on_pythonpath_there_is_no_device(openreg: dict[str, str]) -> None:
    plain = {k: v for k, v in openreg.items() if k != "PYTHONPATH"}
    done = _python("import torch; print(hasattr(torch, 'openreg'))", plain)
    assert done.stdout.strip() == "False"


def test_step1_probe_finds_exactly_the_absent_ops(openreg: dict[str, str]) -> None:
    done = day0("analyze", "tiny-qwen3-moe", "--platform", PLATFORM, "--json", env=openreg, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    coverage = json.loads(done.stdout)["coverage"]
    assert coverage["method"] == "probe"
    missing = {o["op"] for o in coverage["ops"] if o["status"] in ("missing", "dtype_unsupported")}
    assert missing == ABSENT_OPS


_STEPS_2_AND_5 = """
import json, sys
import torch
from day0.spec.pipeline import ModelSpec, load_platform
from day0.steps.analyze.run import analyze_model
from day0.steps.operators.job import OperatorsRequest, run_request
from day0.steps.operators.layers import WholeModel
from day0.steps.trial.alignment import compare_curves
from day0.steps.trial.loop import _device, run_steps
from day0.steps.trial.train import adapted_kernels
from tests.fixtures.trial import tiny_data, tiny_loop
platform = load_platform(sys.argv[1])
analyzed = analyze_model(ModelSpec(source="tiny-deepseek-v3"), platform, "bf16")
request = OperatorsRequest(inventory=analyzed.inventory, platform=platform, compute_dtype="bf16",
                           whole_model=WholeModel.from_analysis(analyzed))
operators = run_request(request)
silu = next(r for r in analyzed.inventory.ops if r.op == "aten::silu")
# step 5's loop as a Ray worker runs it: the platform's device, step 2's adaptations rebuilt
loop = tiny_loop(steps=6, compute_dtype="bf16", device_type="openreg", platform=platform,
                 adaptations=adapted_kernels(operators.ops.adaptations))
events = []
torch.openreg.reset_peak_memory_stats()
log = lambda kind, **kw: events.append((kind, kw))
candidate = run_steps(loop, tiny_data().tokens, device=_device(loop, 0), log=log)
device_peak = torch.openreg.max_memory_allocated()
reference = run_steps(tiny_loop(steps=6, compute_dtype="bf16"), tiny_data().tokens)
print(json.dumps({
    "operators": json.loads(operators.model_dump_json()), "silu_modules": silu.modules,
    "adaptations": [a.describe() for a in loop.adaptations], "calls": candidate[-1]["kernel_calls"],
    "memory": next(kw for kind, kw in events if kind == "memory"), "device_peak": device_peak,
    "aligned": compare_curves([h["loss"] for h in reference], [h["loss"] for h in candidate]).model_dump(mode="json"),
}))
"""


@pytest.fixture(scope="module")
def device_run(openreg: dict[str, str]) -> dict:
    """Steps 1, 2 and the trial's loop on the device, in one process (as a worker runs them)."""
    done = _python(_STEPS_2_AND_5, openreg, str(PLATFORM))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_step2_on_the_device_adapts_the_absent_ops_and_catches_the_wrong_kernel(device_run: dict) -> None:
    result = device_run["operators"]
    ops = result["ops"]
    assert ops["platform"] == "openreg" and ops["emulated_on"] is None, "checked on the device, not emulated"
    adapted = {a["op"]: a for a in ops["adaptations"]}
    for op in ABSENT_OPS:  # the dispatcher's "could not run" is day0's missing kernel, then adapted and rechecked
        assert adapted[op]["cause"] == "missing", adapted[op]["problem"]
        assert adapted[op]["strategy"] and adapted[op]["recheck"]["status"] == "pass"
    assert adapted[WRONG_OP]["cause"] == "wrong_numbers" and adapted[WRONG_OP]["dtype"] == WRONG_DTYPE
    wrong = f"{WRONG_OP} at {WRONG_DTYPE}: the platform's kernel gives wrong numbers"
    assert any(r.startswith(wrong) for r in result["reasons"])
    assert device_run["silu_modules"], "step 1 says which modules run the wrong op"
    assert result["verdict"] == "fail", "a wrong platform kernel fails step 2 even when worked around"
    proven = {c["op"] for c in ops["checks"] if c["status"] == "pass" and c["dtype"] == "bf16"}
    assert {"aten::mm", "aten::silu"} <= proven and ops["compute_dtypes"] == ["bf16"]
    step = result["training_step"]
    assert step["error"] is None and step["loss_platform"] is not None, "the trial's step ran on the device"
    assert step["kernel_calls"].get("stock", 0) > 0 and any(k.startswith("adapt:") for k in step["kernel_calls"])


def test_trial_loop_trains_on_the_device_with_step2s_adaptations(device_run: dict) -> None:
    adapted_ops = {a.split("@")[0] for a in device_run["adaptations"]}
    assert ABSENT_OPS | {WRONG_OP} <= adapted_ops
    calls = device_run["calls"]
    assert calls.get("stock", 0) > 0 and any(k.startswith("adapt:") for k in calls), calls
    aligned = device_run["aligned"]
    assert aligned["passed"], aligned["failures"]
    memory = device_run["memory"]  # the device allocator's peak (reset before the loop), not the process RSS
    assert memory["peak_bytes"] == device_run["device_peak"] > memory["baseline_bytes"]


def test_a_broken_device_library_is_reported_with_the_module_and_its_error(
    openreg: dict[str, str], tmp_path: Path
) -> None:
    """The backend's folder on PYTHONPATH but its library unloadable: `import torch` fails in torch's
    autoload, and day0 says which plugin and why (exit 1), never trains on an emulated device."""
    broken = tmp_path / "backend"
    shutil.copytree(backend_dir(), broken)
    (broken / "day0_openreg" / "libday0_openreg.so").write_bytes(b"not a shared object")
    env = {**openreg, "PYTHONPATH": f"{broken}:{REPO}"}
    done = day0("analyze", "tiny-qwen3-moe", "--platform", PLATFORM, env=env, timeout=600)
    assert done.returncode == 1
    said = " ".join((done.stdout + done.stderr).split())
    assert "day0_openreg" in said and "OSError" in said and "libday0_openreg.so" in said


_CALIBRATION = """
import json
import torch
import torch.distributed as dist
from day0.calibration.kernels import Worker
synced = []
torch.openreg.synchronize = lambda device=None: synced.append(device)
worker = Worker("openreg")
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
figures = {
    "device": str(worker.device),
    "gemm": worker.gemm("bf16", 64, 64, 64, 2)[0],
    "optimizer": worker.optimizer(4, 4096, 2),
    "copy": worker.copy(1 << 20, 2),
    "all_reduce": worker.collective("all_reduce", 1 << 16, 2),
    "device_peak": torch.openreg.max_memory_allocated(),
    "synced": len(synced),
}
worker.leave()
print(json.dumps(figures))
"""


def test_calibration_kernels_measure_the_device(openreg: dict[str, str]) -> None:
    done = _python(_CALIBRATION, openreg)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    # (not `dispatch`: its tiny Llama runs aten::cumsum, which the device lacks, with no adaptation)
    assert got["device"] == "openreg:0"
    assert all(len(got[k]) == 2 and min(got[k]) > 0 for k in ("gemm", "optimizer", "copy", "all_reduce"))
    assert got["device_peak"] >= 2 << 20, "the copy's two MiB buffers were device memory"
    assert got["synced"] > 0, "timings wait for the device through its module's synchronize"
