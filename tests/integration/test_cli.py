"""The CLI as a user runs it: real subprocesses, exit codes, JSON on stdout, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fixtures.cli import day0


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_analyze_json_deepseek_v3() -> None:
    proc = day0("analyze", "deepseek-v3", "--platform", "ascend-910b", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert abs(result["structure"]["params_total"] / 671e9 - 1) < 0.005
    assert 36e9 < result["structure"]["params_active"] < 38e9
    coverage = result["coverage"]
    status = {o["op"]: o for o in coverage["ops"]}
    # torch_npu 2.14.0 has every op of a DeepSeek-V3 training step; the MoE's grouped GEMM is torch's composite
    assert [o for o in coverage["ops"] if o["status"] in ("missing", "dtype_unsupported")] == []
    assert status["aten::_grouped_mm"]["status"] == "default_backend"
    assert status["aten::histc"]["source"] == "torch-npu 2.14.0" and status["aten::histc"]["dtypes_proven"] == []
    assert {f["package"] for f in coverage["files"]} == {"torch", "torch-npu"}


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_analyze_table_and_bad_inputs() -> None:
    proc = day0("analyze", "llama-3-8b", "--platform", "cpu")
    assert proc.returncode == 0 and "8.030B" in proc.stdout
    bad_model = day0("analyze", "no-such-model")
    assert bad_model.returncode == 2 and "model no-such-model" in bad_model.stderr
    bad_platform = day0("analyze", "llama-3-8b", "--platform", "tpu-v9")
    assert bad_platform.returncode == 2 and "--platform" in bad_platform.stderr


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_analyze_prints_no_warnings() -> None:
    """Nothing on stderr but the (transient) progress line: no library's warnings (torchao's enum
    registration under torch 2.15 printed two, see `day0.core.library_logs`), table or JSON."""
    for args in ((), ("--json",)):
        proc = day0("analyze", "tiny-deepseek-v3", *args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip() == "", proc.stderr


def test_validate_lists_every_error_and_exits_2(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "ok"},
                "model": "tiny-deepseek-v3",
                "platform": "cpu",
                "training": {"seq_len": -1},
                "extra": 1,
            }
        )
    )
    proc = day0("validate", str(spec))
    assert proc.returncode == 2
    assert "training.seq_len" in proc.stderr and "extra" in proc.stderr and "2 error(s)" in proc.stderr
    assert day0("validate", "configs/pipelines/tiny-local.yaml").returncode == 0


def test_run_with_bad_spec_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "ok"},
                "model": "tiny-deepseek-v3",
                "platform": "cpu",
                "storage": f"file://{tmp_path}/store",
                "steps": ["analyze", "bogus"],
            }
        )
    )
    proc = day0("run", str(spec))
    assert proc.returncode == 2 and "steps" in proc.stderr
    assert not (tmp_path / "store").exists()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"metadata": {"name": "ok"}, "model": "tiny-deepseek-v3", "platform": "cpu"}))
    proc = day0("run", str(good), "--only", "analyze,warp")
    assert proc.returncode == 2 and "unknown step" in proc.stderr


def test_schema_is_json() -> None:
    proc = day0("schema")
    assert proc.returncode == 0 and json.loads(proc.stdout)["title"] == "PipelineSpec"


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_run_with_unanalysable_model_exits_2_without_a_result(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "no-such-arch", "hidden_size": 8}')
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "bad-model"},
                "model": str(model),
                "platform": "cpu",
                "steps": ["analyze"],
                "storage": f"file://{tmp_path}/store",
            }
        )
    )
    proc = day0("run", str(spec))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "unknown architecture 'no-such-arch'" in proc.stderr and "model_type" in proc.stderr
    assert not list((tmp_path / "store").rglob("result.json"))
    manifest = json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())
    assert manifest["attempts"][-1][0]["status"] == "failed"


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_errors_print_verbatim_not_as_markup(tmp_path: Path) -> None:
    """Patterns and hints hold square brackets; they reach the user as written."""
    spec = tmp_path / "bad-name.yaml"
    spec.write_text("metadata: {name: Bad_Name}\nmodel: tiny-deepseek-v3\nplatform: cpu\n")
    proc = day0("validate", str(spec))
    assert proc.returncode == 2 and "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$" in proc.stderr, proc.stderr
    odd = day0("analyze", "[/weird]")
    assert odd.returncode == 2 and "[/weird]" in odd.stderr and "MarkupError" not in odd.stderr


def test_version_names_the_package_version() -> None:
    import day0 as package

    proc = day0("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"day0 {package.__version__}", proc.stdout + proc.stderr
