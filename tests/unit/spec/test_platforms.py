"""The shipped platforms (issue 37, item 6): every file's hardware loads within its bounds; the mission's
chips cite a source for each figure on its line or say it is not published; a figure nobody published
is asked for by the planner (a `UsageError` naming it), never assumed, and a calibrated profile fills it."""

from __future__ import annotations

import re

import pytest
import yaml

from day0.errors import UsageError
from day0.planner.inputs import PlannerOptions
from day0.planner.profile import CalibratedProfile, CollectivePoint, GemmPoint, apply_profile
from day0.platforms.libraries.resolve import resolve_library
from day0.spec.cluster import CALIBRATED_FIGURES, PLANNER_FIGURES, HardwareSpec, PlatformSpec
from day0.spec.pipeline import spec_from_dict
from day0.steps.parallel.plan import planner_inputs
from tests.fixtures.paths import REPO

PLATFORMS = sorted((REPO / "configs/platforms").glob("*.yaml"))
MISSION_CHIPS = {"ascend-910c", "cambricon-mlu590", "h20", "hygon-k100", "metax-c500", "mthreads-s4000"}
FIGURES = (*PLANNER_FIGURES, "fp8_tflops")
_FIGURE_LINE = re.compile(r"^\s+(\w+):\s*([^#\s]+)\s*(?:#\s*(.*))?$")


def _figure_lines(text: str) -> dict[str, tuple[str, str]]:
    """{figure: (value as written, its line's comment)} of the file's `hardware:` section."""
    lines = text.splitlines()
    start = lines.index("hardware:") + 1
    out = {}
    for line in lines[start:]:
        if not line.startswith(" "):
            break
        if (m := _FIGURE_LINE.match(line)) and m[1] in FIGURES:
            out[m[1]] = (m[2], m[3] or "")
    return out


def test_every_platform_file_loads_and_its_library_resolves_offline(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    # an empty cache and no index: each vendor library comes from the snapshots committed beside the files
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    names = set()
    for path in PLATFORMS:
        doc = yaml.safe_load(path.read_text())
        platform = PlatformSpec.model_validate(doc)
        assert platform.hardware == HardwareSpec.model_validate(doc["hardware"])
        if platform.operator_library != "probe":
            library = resolve_library(platform.operator_library)
            assert library.ops and all(f.via == "snapshot" for f in library.files), path.name
        names.add(platform.name)
        assert platform.name == path.stem
    assert names >= MISSION_CHIPS


@pytest.mark.parametrize("name", sorted(MISSION_CHIPS))
def test_each_mission_chip_figure_cites_a_source_or_says_it_is_unpublished(name: str) -> None:
    text = (REPO / "configs/platforms" / f"{name}.yaml").read_text()
    sources = set(re.findall(r"^# \[(\d+)\] \S", text, re.M))
    figures = _figure_lines(text)
    assert set(figures) == set(FIGURES), f"{name}: every figure is written, null when not published"
    for figure, (value, comment) in figures.items():
        if value == "null":
            assert comment.startswith("not published"), (name, figure, comment)
            if figure in PLANNER_FIGURES:  # and the line says how the planner gets it
                assert ("day0 calibrate" if figure in CALIBRATED_FIGURES else "state it") in comment, (name, figure)
        else:
            cited = set(re.findall(r"\[(\d+)\]", comment))
            assert cited and cited <= sources, f"{name}: {figure} cites {cited or 'nothing'}; sources {sources}"


def _spec_with(hardware: dict) -> object:
    tiny = yaml.safe_load((REPO / "configs/pipelines/tiny-local.yaml").read_text())
    cpu = yaml.safe_load((REPO / "configs/platforms/cpu.yaml").read_text())
    local = yaml.safe_load((REPO / "configs/clusters/local.yaml").read_text())
    return spec_from_dict({**tiny, "platform": {**cpu, "hardware": hardware}, "cluster": local, "planner": {}})


@pytest.mark.parametrize("figure", [f for f in PLANNER_FIGURES if f != "memory_gib"])
def test_an_unpublished_figure_the_planner_needs_is_a_usage_error_naming_it(figure: str) -> None:
    cpu = yaml.safe_load((REPO / "configs/platforms/cpu.yaml").read_text())["hardware"]
    spec = _spec_with({**cpu, figure: None})
    with pytest.raises(UsageError, match=rf"platform cpu hardware\.{figure}: not published .* needs it") as err:
        planner_inputs(spec)
    fix = "run `day0 calibrate cpu`" if figure in CALIBRATED_FIGURES else "state it"
    assert fix in str(err.value)


def test_unpublished_memory_is_the_node_pools_and_without_a_pool_an_error() -> None:
    cpu = yaml.safe_load((REPO / "configs/platforms/cpu.yaml").read_text())["hardware"]
    spec = _spec_with({**cpu, "memory_gib": None})
    cluster, _ = planner_inputs(spec)
    pool = yaml.safe_load((REPO / "configs/clusters/local.yaml").read_text())["node_pools"][0]
    assert cluster.hardware.memory_gib == pool["accelerator"]["memory_gib"]
    assert any("the platform publishes none" in n for n in cluster.notes)
    alone = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"node_pools": []})})
    with pytest.raises(UsageError, match=r"hardware\.memory_gib: not published.*node pool"):
        planner_inputs(alone)


def test_a_calibrated_profile_fills_the_unpublished_peak_and_link() -> None:
    s4000 = yaml.safe_load((REPO / "configs/platforms/mthreads-s4000.yaml").read_text())["hardware"]
    datasheet = HardwareSpec.model_validate(s4000)
    profile = CalibratedProfile(
        platform="mthreads-s4000",
        backend="mccl",
        workers=2,
        created="2026-12-05T00:00:00Z",
        datasheet=datasheet,
        gemm=[GemmPoint(dtype="bf16", m=4096, n=4096, k=4096, tflops=61.5)],
        hbm_bandwidth_gbps=600.0,
        collectives=[CollectivePoint(op="all_reduce", bytes=1 << 28, seconds=0.01, bus_gbps=77.0)],
        collective_latency_us=20.0,
        kernel_launch_us=14.0,
    )
    hardware, _ = apply_profile(datasheet, PlannerOptions(), profile)
    assert hardware.bf16_tflops == 100  # published: the measurement below it stays an efficiency
    unpublished = datasheet.model_copy(update={"bf16_tflops": None})
    hardware, options = apply_profile(unpublished, PlannerOptions(), profile)
    assert hardware.figure("bf16_tflops") == 61.5 and options.gemm_efficiency["bf16"] == 1.0
    assert hardware.figure("intra_node_bandwidth_gbps") == 77.0 and hardware.figure("kernel_launch_us") == 14.0
    with pytest.raises(UsageError, match=r"inter_node_bandwidth_gbps: not published.*state it"):
        hardware.figure("inter_node_bandwidth_gbps")  # no microbenchmark measures the cluster's NICs
