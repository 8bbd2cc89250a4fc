"""`day0 run` on a tiny sharded FP8 release (built here): step 1 reports its shards, dtypes and
tokenizer checked, step 2 a layer of its real weights within tolerance; a bad scale fails step 2
naming the file and tensor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fixtures.budgets import small_production_checks
from tests.fixtures.cli import day0
from tests.fixtures.release import add_tokenizer, make_fp8_release, read_tensors, save_model, write_checkpoint

SCALE = "model.layers.1.self_attn.o_proj.weight_scale_inv"


def _run(release: Path, root: Path) -> tuple[dict, dict, str]:
    root.mkdir(parents=True)
    spec = root / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            small_production_checks(
                {
                    "metadata": {"name": "release-day"},
                    "model": str(release),
                    "platform": "cpu",
                    "training": {"precision": {"compute": "bf16"}},
                    "steps": ["analyze", "operators"],
                    "storage": f"file://{root}/store",
                }
            )
        )
    )
    proc = day0("run", str(spec))
    results = {p.parent.name: json.loads(p.read_text()) for p in (root / "store").rglob("result.json")}
    return results.get("analyze", {}), results.get("operators", {}), proc.stdout + proc.stderr


@pytest.mark.integration  # over 10 s here: the real CLI end to end
def test_day0_run_checks_the_release_and_runs_a_layer_of_its_real_weights(tmp_path: Path) -> None:
    plain = save_model(tmp_path / "plain", "tiny-deepseek-v3")
    add_tokenizer(plain)
    fp8 = make_fp8_release(tmp_path / "fp8", plain)
    analyze, operators, output = _run(fp8, tmp_path / "good")
    release = analyze["release"]
    assert release["problems"] == [] and release["not_checked"] == [], output[-3000:]
    assert len(release["weights"]["shards"]) == 3 and {"F8_E4M3", "F32"} <= set(release["weights"]["bytes_by_dtype"])
    assert release["tokenizer"]["round_trip"] and release["tokenizer"]["chat_template"]
    real = operators["real_weights"]
    assert real["not_run"] is None and real["problems"] == [] and real["layer"] == 1 and real["dequantised"] == 19
    assert real["layers"]["first_divergent"] is None and real["layers"]["error"] is None
    assert real["layers"]["reference_dtype"] == "fp64" and real["layers"]["compute_dtype"] == "bf16"

    tensors = read_tensors(fp8)
    tensors[SCALE] = tensors[SCALE].clone().fill_(float("nan"))
    n = tensors[SCALE].numel()
    shards = write_checkpoint(fp8, tensors)
    index = json.loads((fp8 / "model.safetensors.index.json").read_text())["weight_map"]
    assert index[SCALE] in shards
    _, operators, output = _run(fp8, tmp_path / "bad")
    problems = operators["real_weights"]["problems"]
    assert problems == [f"{index[SCALE]}: scale tensor {SCALE!r}: {n} of {n} scales are not finite and positive"]
    assert f"{index[SCALE]}: scale tensor {SCALE!r}" in output
