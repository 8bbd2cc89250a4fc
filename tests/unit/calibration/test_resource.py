"""Calibration asks Ray for the platform's own resource and fails fast without it (issue 42, item 7):
`day0 calibrate ascend-910b` asked Ray for GPUs (every non-CUDA device without a KubeRay pool mapped to
`GPU`), printed nothing for 330 s on a host without the device, then ended in "internal error:
CalibrationError". Real processes: the command line, its exit code, its one message, and nothing of
it left running."""

from __future__ import annotations

import time
from pathlib import Path
from subprocess import DEVNULL, PIPE

import pytest
from pydantic import ValidationError

from day0.backends.resources import accelerator_resource, task_options
from day0.paths import CONFIGS_DIR
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import load_platform
from tests.fixtures.cli import start_day0
from tests.fixtures.processes import processes

PLATFORMS = sorted(p.stem for p in (CONFIGS_DIR / "platforms").glob("*.yaml"))


@pytest.mark.parametrize("name", PLATFORMS)
def test_each_platform_asks_ray_for_the_resource_its_file_names(name: str) -> None:
    platform = load_platform(name)
    ray_resource = accelerator_resource(platform)
    if platform.device_type == "cpu":
        assert ray_resource is None and task_options(platform) == {"num_cpus": 1}
    elif platform.resource == "nvidia.com/gpu":
        assert ray_resource == "GPU" and task_options(platform) == {"num_cpus": 1, "num_gpus": 1}
    else:  # a vendor's resource is never counted as NVIDIA's GPUs
        assert platform.resource is not None and ray_resource == platform.resource.split("/")[-1] != "GPU"
        assert task_options(platform) == {"num_cpus": 1, "resources": {ray_resource: 1}}


def test_the_issues_platforms() -> None:
    assert accelerator_resource(load_platform("ascend-910b")) == "Ascend910"  # was GPU
    assert accelerator_resource(load_platform("hygon-k100")) == "dcu"  # device type cuda, not NVIDIA's resource


def test_a_device_type_without_its_resource_is_refused() -> None:
    hardware = {"memory_gib": 64, "bf16_tflops": 300, "intra_node_bandwidth_gbps": 100, "inter_node_bandwidth_gbps": 25}
    raw = {"name": "npu", "device_type": "npu", "hardware": hardware}
    with pytest.raises(ValidationError, match="needs the Kubernetes resource one accelerator is"):
        PlatformSpec.model_validate(raw)
    assert PlatformSpec.model_validate({**raw, "resource": "huawei.com/Ascend910"}).accelerator() == (
        "huawei.com/Ascend910"
    )


NO_STATS = {"RAY_USAGE_STATS_ENABLED": "0"}


def _reapers_of(pid: int) -> list[int]:
    return [p for p, (_, cmd) in processes().items() if f"cli.reaper {pid} " in cmd]


@pytest.mark.parametrize(("platform", "resource"), [("ascend-910b", "'Ascend910'"), ("h800", "'GPU'")])
def test_calibrate_without_the_device_ends_in_seconds_with_one_message(
    platform: str, resource: str, tmp_path: Path
) -> None:
    start = time.monotonic()
    proc = start_day0(
        "calibrate", platform, "--store", f"file://{tmp_path}/store", env=NO_STATS, stdout=PIPE, stderr=PIPE
    )
    out, err = proc.communicate(timeout=180)
    took = time.monotonic() - start
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert resource in errors[0] and "nothing was measured" in errors[0] and f"calibrate {platform}" in errors[0]
    assert out == "" and not (tmp_path / "store" / "calibration").exists()
    assert took < 60, f"{took:.0f} s"  # 6.5 s on the loaded 2-core host (imports); it waited 330 s before
    deadline = time.monotonic() + 10
    while _reapers_of(proc.pid) and time.monotonic() < deadline:  # its watcher ends once the command line is gone
        time.sleep(0.2)
    assert not _reapers_of(proc.pid), "the command line's watcher outlived it"


def test_kill_9_of_calibrate_leaves_nothing(tmp_path: Path) -> None:
    """kill -9 of `day0 calibrate` as it starts (its watcher up, the device check under way): neither its
    watcher nor any process it started stays. (Mid-measurement on a local Ray: tests/integration/test_reaper.py.)"""
    store = f"file://{tmp_path}/store"
    proc = start_day0("calibrate", "ascend-910b", "--store", store, env=NO_STATS, stdout=DEVNULL, stderr=DEVNULL)
    deadline = time.monotonic() + 60
    while not _reapers_of(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    watchers = _reapers_of(proc.pid)
    assert watchers and proc.poll() is None, "the command line ended before its watcher was seen"
    started = {p for p, (ppid, _) in processes().items() if ppid == proc.pid}
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    while (left := [p for p in started | set(watchers) if p in processes()]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, "still running after kill -9: " + "; ".join(processes()[p][1][:100] for p in left)
