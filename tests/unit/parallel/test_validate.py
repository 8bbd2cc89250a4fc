"""Pinned knobs that contradict each other, another section or the model are refused by `day0 validate`
(exit 2), each issue naming both fields: through the function validate calls (`cli.preflight.preflight`)
for every rule, and once through the real command."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli.preflight import preflight
from day0.errors import SpecError
from day0.spec.pipeline import load_yaml
from tests.fixtures import paths
from tests.fixtures.cli import day0

DATA = paths.DATA / "planner"

# (what the spec writes on top of the Qwen3 elastic spec, the issue's field, the other field it names)
CONTRADICTIONS = [
    (
        {"parallel": {"zero_stage": 3, "distributed_optimizer": True}},
        "parallel.zero_stage",
        "parallel.distributed_optimizer",
    ),
    (
        {"parallel": {"virtual_pipeline_stages": 2, "pipeline_parallel": 1}},
        "parallel.virtual_pipeline_stages",
        "parallel.pipeline_parallel",
    ),
    (
        {"parallel": {"recompute": {"granularity": "selective", "modules": ["mla_up_proj"]}}},
        "parallel.recompute.modules",
        "model.source",
    ),
    (
        {"parallel": {"recompute": {"granularity": "selective", "modules": ["mlp_act"]}}},
        "parallel.recompute.modules",
        "model.source",
    ),
    (
        {"parallel": {"recompute": {"granularity": "selective", "num_layers": 2}}},
        "parallel.recompute.num_layers",
        "parallel.recompute.granularity",
    ),
    (
        {"parallel": {"recompute": {"granularity": "full", "num_layers": 49}}},
        "parallel.recompute.num_layers",
        "model.source",
    ),
    (
        {"parallel": {"dualpipe": True, "virtual_pipeline_stages": 2}},
        "parallel.dualpipe",
        "parallel.virtual_pipeline_stages",
    ),
    ({"parallel": {"dualpipe": True, "pipeline_parallel": 3}}, "parallel.dualpipe", "parallel.pipeline_parallel"),
    ({"parallel": {"fp8": {"recipe": "blockwise"}}}, "parallel.fp8", "training.precision.compute"),
    ({"parallel": {"micro_batch": 2}}, "parallel.micro_batch", "training.micro_batch"),  # the spec writes 1
    (
        {"parallel": {"sequence_parallel": False}, "planner": {"sequence_parallel": True}},
        "parallel.sequence_parallel",
        "planner.sequence_parallel",
    ),
    (
        {"parallel": {"overlap": {"ep": True}}, "planner": {"overlap": {"ep": False}}},
        "parallel.overlap.ep",
        "planner.overlap.ep",
    ),
    (
        {"parallel": {"expert_tensor_parallel": 2, "tensor_parallel": 4}},
        "parallel.expert_tensor_parallel",
        "parallel.tensor_parallel",
    ),
    (
        {"parallel": {"grad_reduce_dtype": "fp32"}, "planner": {"grad_dtype": "bf16"}},
        "parallel.grad_reduce_dtype",
        "planner.grad_dtype",
    ),
    (
        {"parallel": {"distributed_optimizer": True}, "planner": {"software": "torchtitan-fsdp2-2024"}},
        "parallel.distributed_optimizer",
        "planner.software",
    ),
    (
        {"parallel": {"zero_stage": 3}, "planner": {"software": "megatron-lm-2021"}},
        "parallel.zero_stage",
        "planner.software",
    ),
    (
        {"parallel": {"overlap": {"ep": True}}, "planner": {"software": "torchtitan-fsdp2-2024"}},
        "parallel.overlap.ep",
        "planner.software",
    ),
    (
        {"planner": {"software": "megatron-lm-2021", "overlap": {"tp": True}}},
        "planner.overlap.tp",
        "planner.software",
    ),
    (
        {"parallel": {"dualpipe": True}, "planner": {"software": "megatron-core-2025"}},
        "parallel.dualpipe",
        "planner.software",
    ),
    (
        {"planner": {"software": "torchtitan-fsdp2-2024", "dualpipe": True}},
        "planner.dualpipe",
        "planner.software",
    ),
    (
        {"planner": {"software": "megatron-lm-2021", "flash_attention": True}},
        "planner.flash_attention",
        "planner.software",
    ),
    ({"planner": {"software": "mindspeed-2025"}}, "planner.software", "platform.device_type"),  # an H100 spec
    (
        {
            "planner": {"software": "megatron-lm-2021"},
            "training": {"seq_len": 4096, "global_batch": 512, "precision": {"compute": "fp8"}},
        },
        "training.precision.compute",
        "planner.software",
    ),
    (
        {"planner": {"software": "fsdp-trainer-2024"}, "parallel": {"grad_reduce_dtype": "fp32"}},
        "parallel.grad_reduce_dtype",
        "planner.software",
    ),
    (
        {"parallel": {"overlap": {"ep": True}}, "planner": {"moe_token_dispatcher": "allgather"}},
        "parallel.overlap.ep",
        "planner.moe_token_dispatcher",
    ),
    (
        {
            "parallel": {"fp8": {"dispatch": True}},
            "planner": {"moe_token_dispatcher": "allgather"},
            "training": {"seq_len": 4096, "global_batch": 512, "precision": {"compute": "fp8"}},
        },
        "parallel.fp8.dispatch",
        "planner.moe_token_dispatcher",
    ),
]


def _write(tmp_path: Path, extra: dict, model: str | None = None) -> Path:
    raw = load_yaml(DATA / "qwen3-30b-a3b-64-h100-elastic.yaml")
    raw.update(extra)
    if model:
        raw["model"] = {"source": model}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("extra", "field", "other"), CONTRADICTIONS, ids=[c[1] + "/" + c[2] for c in CONTRADICTIONS])
def test_a_contradiction_is_refused_naming_both_fields(tmp_path: Path, extra: dict, field: str, other: str) -> None:
    with pytest.raises(SpecError) as err:
        preflight(str(_write(tmp_path, extra)), None, check_store=False)
    assert err.value.exit_code == 2
    issues = [i for i in err.value.issues if i.field == field]
    assert issues and other in issues[0].message, err.value.issues


def test_expert_parallelism_on_a_dense_model_names_the_model(tmp_path: Path) -> None:
    path = _write(tmp_path, {"parallel": {"expert_parallel": 8}}, model="llama-3-8b")
    with pytest.raises(SpecError) as err:
        preflight(str(path), None, check_store=False)
    assert any(i.field == "parallel.expert_parallel" and "model.source" in i.message for i in err.value.issues)


def test_consistent_pins_validate(tmp_path: Path) -> None:
    """The same fields, agreeing: no issue (each rule refuses only the contradiction)."""
    extra = {
        "parallel": {
            "zero_stage": 1,
            "distributed_optimizer": True,
            "pipeline_parallel": 4,
            "virtual_pipeline_stages": 2,
            "recompute": {"granularity": "selective", "modules": ["core_attn", "moe_act", "layernorm"]},
            "micro_batch": 1,
            "overlap": {"ep": True},
        },
        "planner": {"overlap": {"ep": True}, "moe_token_dispatcher": "alltoall"},
    }
    spec, _ = preflight(str(_write(tmp_path, extra)), None, check_store=False)
    assert spec.parallel != "auto" and spec.parallel.zero_stage == 1


def test_day0_validate_exits_2_naming_both_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "parallel": {
                "zero_stage": 3,
                "distributed_optimizer": True,
                "pipeline_parallel": 1,
                "virtual_pipeline_stages": 2,
            }
        },
    )
    proc = day0("validate", path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "parallel.zero_stage: 3 contradicts parallel.distributed_optimizer: true" in proc.stderr
    assert "parallel.virtual_pipeline_stages: 2 contradicts parallel.pipeline_parallel: 1" in proc.stderr
