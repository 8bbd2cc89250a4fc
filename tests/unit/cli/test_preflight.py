"""`day0 validate` makes every check `day0 run` makes before it starts (one function, `cli.preflight`):
each refusal of run is validate's, with the same exit code and message; and the README's showcase
spec validates and plans offline, from the hub-layout cache shipped in configs/hub/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from cli import main as cli
from tests.fixtures.cli import day0
from tests.fixtures.paths import REPO

SHOWCASE = REPO / "configs" / "pipelines" / "deepseek-v3-on-npu.yaml"
TINY = json.loads((REPO / "configs" / "models" / "tiny-deepseek-v3" / "config.json").read_text())
S3_DOWN = {  # a closed port: the store does not answer, at once
    "DAY0_STORE_ENDPOINT_URL": "http://127.0.0.1:9",
    "DAY0_STORE_ACCESS_KEY_ID": "k",
    "DAY0_STORE_SECRET_ACCESS_KEY": "s",
    "AWS_MAX_ATTEMPTS": "1",
}
POOL = "node_pools: [{name: p, accelerator: {resource: nvidia.com/gpu, per_node: 8, memory_gib: 80}, nodes: 1}]"
# An inline platform whose library overrides make the spec, as JSON, larger than Prefect's parameter limit.
BIG_PLATFORM = (
    "platform:\n  name: big\n  device_type: cpu\n  distributed_backend: gloo\n"
    "  hardware: {memory_gib: 16, bf16_tflops: 1, intra_node_bandwidth_gbps: 10, inter_node_bandwidth_gbps: 1}\n"
    "  operator_library:\n    package: torch-npu\n    version: '2.14.0'\n    overrides:\n"
    + "".join(f"      - {{op: 'aten::op{n}', reason: '{'x' * 1000}'}}\n" for n in range(600))
)


NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/nonexistent/day0-test-links"}  # pip serves nothing


def _npu_library(library: str) -> str:
    """An NPU platform with `library`, running steps 1-2 (day0 serves on no NPU: step 6 would be refused)."""
    return (
        "platform: {name: npu, device_type: npu, resource: huawei.com/Ascend910, hardware: {memory_gib: 64, "
        "bf16_tflops: 300, intra_node_bandwidth_gbps: 100, inter_node_bandwidth_gbps: 25}, "
        f"operator_library: {library}}}\n"
        "steps: [analyze, operators]\n"
    )


def spec(
    model: str = "tiny-deepseek-v3",
    storage: str = "file://{tmp}/store",
    extra: str = "",
    platform: str = "platform: cpu\n",
) -> str:
    return f"metadata: {{name: pre}}\nmodel: {model}\n{platform}storage: {storage}\n{extra}"


@dataclass
class Refusal:
    id: str
    spec: str
    exit_code: int
    words: list[str]
    only: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    store: bool = False  # a check of the store: validate makes it only with --check-store


def model_dir(**changes: object) -> dict[str, str]:
    """Files of a model directory `{tmp}/model` holding the tiny config with `changes`."""
    return {"model/config.json": json.dumps({**TINY, **changes})}


REFUSALS = [
    Refusal("invalid-spec", spec(extra="training: {seq_len: 0}\n"), 2, ["training.seq_len"]),
    Refusal("store-bad-scheme", spec(storage="ftp://x/y"), 2, ["storage"]),
    Refusal("only-unknown", spec(), 2, ["--only", "unknown step", "warp"], only="analyze,warp"),
    Refusal("only-empty", spec(), 2, ["--only", "empty selection"], only=" , "),
    Refusal("only-outside-steps", spec(extra="steps: [analyze]\n"), 2, ["--only trial", "nothing to run"], "trial"),
    Refusal("no-steps", spec(extra="steps: []\n"), 2, ["steps", "nothing to run"]),
    Refusal(
        "kuberay-file-store",
        spec(extra=f"cluster: {{backend: kuberay, {POOL}}}\n"),
        2,
        ["storage", "kuberay backend needs an s3:// store"],
    ),
    Refusal(
        "kuberay-no-pools",
        spec(storage="s3://bucket/x", extra="cluster: {backend: kuberay}\n"),
        2,
        ["cluster.node_pools", "at least one node pool"],
    ),
    Refusal("model-unknown", spec(model="no-such-model"), 2, ["model no-such-model", "model.source"]),
    Refusal(
        "model-not-cached-offline",
        spec(model="hf://acme/not-cached@main"),
        2,
        ["hf://acme/not-cached@main", "hub is offline"],
    ),
    Refusal(
        "model-implausible",
        spec(model="{tmp}/model"),
        2,
        ["num_hidden_layers", "1024"],
        files={"model/config.json": json.dumps({**TINY, "num_hidden_layers": 10**9})},
    ),
    Refusal("spec-too-large-for-prefect", spec(platform=BIG_PLATFORM), 2, ["bytes as JSON", "Prefect"]),
    Refusal(
        "store-unreachable",
        spec(storage="s3://bucket/x"),
        1,
        ["cannot reach bucket", "DAY0_STORE_ENDPOINT_URL"],
        env=S3_DOWN,
        store=True,
    ),
    # --- issue 10: bad values accepted until late or never ------------------------------------------
    Refusal(
        "engine-sglang",
        spec(extra="inference: {engine: sglang}\n"),
        2,
        ["inference.engine", "'sglang'", "no CPU wheel"],
    ),
    Refusal(
        "engine-vllm-on-musa",
        spec(platform="platform: mthreads-s4000\n", extra="inference: {engine: vllm}\n"),
        2,
        ["inference.engine", "'vllm'", "'musa'"],
    ),
    Refusal(
        "engine-transformers-on-npu",
        spec(platform="platform: ascend-910b\n", extra="inference: {engine: transformers}\n"),
        2,
        ["inference.engine", "'npu'"],
    ),
    Refusal(
        "cache-blocks-beyond-use",
        spec(extra="inference: {cache_blocks: 10000000}\n"),
        2,
        ["inference", "cache_blocks 10,000,000", "more than the engine can use"],
    ),
    Refusal(
        "context-beyond-positions",
        spec(extra="inference: {context_len: 4096}\n"),
        2,
        ["inference.context_len", "4,096 tokens", "max_position_embeddings (2,048)"],
    ),
    Refusal(
        "seq-len-beyond-positions",
        spec(extra="training: {seq_len: 8192}\ntrial: {seq_len: 4096}\n"),
        2,
        ["training.seq_len", "trial.seq_len", "max_position_embeddings (2,048)"],
    ),
    Refusal(
        "seq-len-beyond-yarn",  # YaRN extends the 2,048 positions 4x: 8,192 is in, 16,384 is not
        spec(model="{tmp}/model", extra="training: {seq_len: 16384}\ntrial: {seq_len: 8192}\n"),
        2,
        ["1 error(s)", "training.seq_len", "8,192 positions", "rope_scaling yarn (factor 4 x"],
        files=model_dir(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}),
    ),
    Refusal(
        "hbm-bandwidth-1e-9", spec(extra="planner: {hbm_bandwidth_gbps: 1.0e-9}\n"), 2, ["planner.hbm_bandwidth_gbps"]
    ),
    Refusal(  # issue 37: msprobe's standards neither cached nor snapshotted (day0 never downloads at run time)
        "msprobe-version-unavailable",
        spec(extra="validation: {tolerance: msprobe, msprobe_version: 9.9.9}\n"),
        2,
        ["validation.msprobe_version", "msprobe 9.9.9", "make tolerance-snapshots MSPROBE_VERSIONS=9.9.9"],
    ),
    Refusal("hbm-bandwidth-inf", spec(extra="planner: {hbm_bandwidth_gbps: .inf}\n"), 2, ["finite number"]),
    Refusal("learning-rate-inf", spec(extra="trial: {learning_rate: .inf}\n"), 2, ["trial.learning_rate", "finite"]),
    # --- the five bad inputs that ended as "internal error", exit 1 -------------------------------------
    Refusal(
        "kernel-launch-inf",  # ValueError: cannot convert float NaN to integer (day0 plan)
        spec(
            platform="platform: {name: x, device_type: cpu, hardware: {memory_gib: 16, bf16_tflops: 1, "
            "intra_node_bandwidth_gbps: 10, inter_node_bandwidth_gbps: 1, kernel_launch_us: .inf}}\n"
        ),
        2,
        ["platform.hardware.kernel_launch_us", "finite number"],
    ),
    Refusal(
        "hbm-bandwidth-1e-300",  # ZeroDivisionError (day0 plan)
        spec(extra="planner: {hbm_bandwidth_gbps: 1.0e-300}\n"),
        2,
        ["planner.hbm_bandwidth_gbps", "greater than or equal to 1"],
    ),
    Refusal(
        "heads-do-not-split-hidden",  # RuntimeError: size of tensor a (3) must match (day0 analyze, step 1)
        spec(model="{tmp}/model"),
        2,
        ["num_attention_heads", "hidden_size 256"],
        files=model_dir(num_attention_heads=3, kv_lora_rank=None, num_key_value_heads=3),
    ),
    Refusal(
        "kv-heads-do-not-split-heads",  # RuntimeError inside the attention (step 1)
        spec(model="{tmp}/model"),
        2,
        ["num_key_value_heads", "3 K/V heads"],
        files=model_dir(num_key_value_heads=3),
    ),
    Refusal(
        "unknown-torch-dtype",  # AttributeError: module 'torch' has no attribute 'float99' (step 1)
        spec(model="{tmp}/model"),
        2,
        ["torch_dtype", "float99"],
        files=model_dir(torch_dtype="float99"),
    ),
    Refusal(
        "rope-scaling-not-a-mapping",  # StrictDataclassFieldValidationError inside transformers (step 1)
        spec(model="{tmp}/model"),
        2,
        ["rope_scaling", "a mapping"],
        files=model_dir(rope_scaling="x"),
    ),
    Refusal(
        "store-root-is-a-file",  # NotADirectoryError after the search (day0 plan, day0 run, day0 calibrate)
        spec(storage="file://{tmp}/afile"),
        1,
        ["storage file://", "afile is not a directory"],
        files={"afile": "x"},
        store=True,
    ),
    Refusal(
        "store-below-a-file",
        spec(storage="file://{tmp}/afile/store"),
        1,
        ["cannot be created", "afile is not a directory"],
        files={"afile": "x"},
        store=True,
    ),
    # --- issue 37: the operator library is read from the vendor's package, as step 1 will read it ---------
    Refusal(
        "library-version-not-served",
        spec(platform=_npu_library("{package: torch-npu, version: '0.0.1'}")),
        2,
        ["platform.operator_library.version", "torch-npu 0.0.1", "day0 fetch-library torch-npu==0.0.1"],
        env=NO_INDEX,
    ),
    Refusal(
        "library-package-unknown",
        spec(platform=_npu_library("{package: torch-xpu, version: '1.0'}")),
        2,
        ["platform.operator_library.package", "unknown package 'torch-xpu'", "torch-npu"],
    ),
    Refusal(
        "control-character-in-text",
        spec(extra='trial: {dataset: "x\\n![a](loss.png)"}\n'),
        2,
        ["trial.dataset", "control character (0x0a)"],
    ),
]


def _day0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", REFUSALS, ids=[c.id for c in REFUSALS])
def test_run_refuses_what_validate_refuses_with_the_same_message(
    case: Refusal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, content in case.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    path = tmp_path / "s.yaml"
    path.write_text(case.spec.replace("{tmp}", str(tmp_path)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("DAY0_HUB_CACHE_DIR", str(tmp_path / "hub"))  # an empty hub cache
    monkeypatch.setenv(cli._PREFECT_STARTUP, "120")  # what run sets: restored after the test
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)

    def no_flow(*args: object) -> dict:
        raise AssertionError("run started its flow: a check came after Prefect")

    monkeypatch.setattr(cli, "_run_flow", no_flow)
    only = ["--only", case.only] if case.only is not None else []
    run_code, run_err = _day0(["run", str(path), *only], capsys)
    validate_code, validate_err = _day0(["validate", str(path), *only, "--check-store"], capsys)
    assert run_code == case.exit_code, run_err
    for word in case.words:
        assert word in run_err, f"{word!r} not in: {run_err}"
    assert (validate_code, validate_err) == (run_code, run_err)
    if not case.store:  # the store is the one check validate makes only when asked
        assert _day0(["validate", str(path), *only], capsys) == (run_code, run_err)
    assert not (tmp_path / "store").exists(), "a refused spec wrote to its store"


_NO_HEAVY_IMPORTS = """
import sys, cli.main as m
code = m.main(sys.argv[1:])
heavy = sorted(x for x in ("prefect", "ray", "torch", "transformers") if x in sys.modules)
assert not heavy, f"imported before refusing: {heavy}"
sys.exit(code)
"""


def test_run_refuses_before_importing_prefect(tmp_path: Path) -> None:
    """The user report: run refused a kuberay spec with a file:// store only after 15 s of imports."""
    (tmp_path / "s.yaml").write_text(
        spec(storage=f"file://{tmp_path}/store", extra=f"cluster: {{backend: kuberay, {POOL}}}\n")
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _NO_HEAVY_IMPORTS, "run", str(tmp_path / "s.yaml")],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "kuberay backend needs an s3:// store" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - start < 30


def test_selection_check_agrees_with_the_flows_plan() -> None:
    """`check_only` refuses exactly the selections for which the flow would plan no step."""
    from cli.preflight import check_only
    from day0.errors import UsageError
    from day0.spec.pipeline import STEPS, spec_from_dict
    from flows.adapt import plan_steps

    for steps in (list(STEPS), ["analyze"], ["trial", "inference"], ["parallel"]):
        spec_ = spec_from_dict(
            {"metadata": {"name": "x"}, "model": "tiny-deepseek-v3", "platform": "cpu", "steps": steps}
        )
        for only in (None, ["analyze"], ["trial"], ["optimize", "inference"], ["operators"]):
            try:
                check_only(spec_, only)
                refused = False
            except UsageError:
                refused = True
            assert refused == (not plan_steps(spec_, only)), (steps, only)


def test_bundled_hub_cache_is_the_models_config() -> None:
    from day0.model.source import BUNDLED_HUB_CACHE

    repo = BUNDLED_HUB_CACHE / "models--deepseek-ai--DeepSeek-V3"
    commit = (repo / "refs" / "main").read_text()
    assert re.fullmatch(r"[0-9a-f]{40}", commit), "refs/main is the bare commit (no newline)"
    shipped = json.loads((repo / "snapshots" / commit / "config.json").read_text())
    assert shipped == json.loads((REPO / "configs" / "models" / "deepseek-v3" / "config.json").read_text())


def test_hf_source_falls_back_to_the_bundled_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from day0.model.source import BUNDLED_HUB_CACHE, resolve_model_source
    from day0.settings import HubSettings

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model_source("hf://deepseek-ai/DeepSeek-V3@main", HubSettings(cache_dir=tmp_path))
    assert resolved.directory.parent.parent == BUNDLED_HUB_CACHE / "models--deepseek-ai--DeepSeek-V3"
    assert resolved.commit == resolved.directory.name and resolved.revision == "main"
    assert resolved.config["n_routed_experts"] == 256
    assert not list(tmp_path.iterdir()), "the user's hub cache was written to"


OFFLINE_DROP = ("AWS_", "DAY0_STORE_", "HF_HUB_CACHE")  # the test's own store and hub: not the user's


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_readme_showcase_validates_and_plans_offline(tmp_path: Path) -> None:
    offline = {**S3_DOWN, "HF_HUB_OFFLINE": "1", "DAY0_HUB_CACHE_DIR": str(tmp_path / "hub")}
    readme = (REPO / "README.md").read_text()
    block = readme.split("## The spec", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "readme.yaml").write_text(block)
    assert yaml.safe_load(block)["model"]["source"] == "hf://deepseek-ai/DeepSeek-V3@main"
    for path in (str(SHOWCASE), "readme.yaml"):
        proc = day0("validate", path, cwd=tmp_path, env=offline, drop=OFFLINE_DROP)
        assert proc.returncode == 0, proc.stderr
        assert "s3://day0-artifacts/runs/runs/deepseek-v3-on-npu/" in proc.stdout
    out = tmp_path / "deepseek-v3-on-npu.plan.yaml"
    proc = day0("plan", SHOWCASE, "--top", "3", "--out", out, cwd=tmp_path, env=offline, drop=OFFLINE_DROP)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"plan written to {out}" in proc.stdout and "cannot reach bucket" in proc.stderr
    assert out.read_text().startswith("# day0 plan: deepseek-v3-on-npu from ")
    plan = yaml.safe_load(out.read_text())
    assert plan["parallel"]["expert_parallel"] >= 1 and plan["precision"]["compute"] == "bf16"
    # without --out the plan goes to the store, which does not answer here: refused, saying so
    proc = day0("plan", SHOWCASE, cwd=tmp_path, env=offline, drop=OFFLINE_DROP)
    assert proc.returncode == 1 and "--out FILE" in proc.stderr and "cannot reach bucket" in proc.stderr


@pytest.mark.parametrize(
    "verdicts, failed, shown",
    [
        ({"analyze": "pass", "parallel": "pass"}, {}, "PASS"),
        ({"analyze": "pass", "operators": "warn"}, {}, "WARN"),
        ({"analyze": "pass", "trial": "fail", "inference": "skipped"}, {"trial": ["loss diverged"]}, "FAIL"),
        ({"analyze": "error"}, {"analyze": ["raised"]}, "FAIL"),
    ],
)
def test_run_ends_with_the_verdict_and_the_report(
    verdicts: dict[str, str],
    failed: dict[str, list[str]],
    shown: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec(storage=f"file://{tmp_path}/store"))
    report = f"file://{tmp_path}/store/runs/pre/x/report.html"
    summary = {
        "run_id": "x",
        "flow_run_id": None,
        "prefix": "runs/pre/x",
        "steps": list(verdicts),
        "executed": list(verdicts),
        "reused": [],
        "verdicts": verdicts,
        "failed": failed,
        "report": {"html": report, "markdown": report.replace(".html", ".md")},
    }
    monkeypatch.setenv(cli._PREFECT_STARTUP, "120")
    monkeypatch.setattr(cli, "_run_flow", lambda *args: summary)
    code, err = _day0(["run", str(path)], capsys)
    assert code == (1 if failed else 0)
    assert err.strip().splitlines()[-1] == f"verdict {shown}; report: {report}"
