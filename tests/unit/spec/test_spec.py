"""The spec: valid pipelines load, bad ones list every error with file, field and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from day0.errors import SpecError
from day0.spec.pipeline import PipelineSpec, load_spec, spec_from_dict
from tests.fixtures.paths import REPO

MINIMAL = {"metadata": {"name": "t"}, "model": "tiny-deepseek-v3", "platform": "cpu"}


@pytest.mark.parametrize("path", sorted((REPO / "configs/pipelines").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_pipelines_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.kind == "AdaptationPipeline"
    assert spec.platform.hardware.memory_gib > 0


def test_named_references_resolve_against_configs() -> None:
    spec = spec_from_dict({**MINIMAL, "cluster": "gpu-multinode"})
    assert spec.platform.device_type == "cpu"
    pools = {p.name: p for p in spec.cluster.node_pools}
    assert pools["h100-fixed"].nodes == 32 and pools["cloud-elastic"].elastic.max == 16
    assert pools["cloud-elastic"].max_nodes == 16
    assert spec.cluster.backend == "kuberay"


def test_all_errors_are_listed_with_field_paths(tmp_path: Path) -> None:
    bad = {
        "metadata": {"name": "Bad_Name"},
        "model": {"source": "tiny-deepseek-v3", "colour": "blue"},
        "platform": "no-such-platform",
        "training": {"seq_len": 0, "precision": {"compute": "fp7"}},
        "cluster": {"node_pools": [{"name": "p", "accelerator": {"per_node": 8, "memory_gib": 80}}]},
        "storage": "ftp://nowhere",
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    fields = {issue.field for issue in info.value.issues}
    assert {
        "metadata.name",
        "model.colour",
        "platform",
        "training.seq_len",
        "training.precision.compute",
        "cluster.node_pools.0",
        "storage",
    } <= fields, fields
    text = str(info.value)
    assert str(path) in text and "unknown platform 'no-such-platform'" in text and "cpu" in text
    assert "exactly one of 'nodes'" in text


def test_yaml_and_file_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("metadata: {name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(broken)
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "missing.yaml")
    list_spec = tmp_path / "list.yaml"
    list_spec.write_text("- 1\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(list_spec)


def test_elastic_range_must_be_ordered() -> None:
    pool = {"name": "e", "accelerator": {"per_node": 8, "memory_gib": 80}, "elastic": {"min": 5, "max": 2}}
    with pytest.raises(SpecError, match=r"elastic.min"):
        spec_from_dict({**MINIMAL, "cluster": {"node_pools": [pool]}})


def test_fingerprint_ignores_step_selection_but_not_content() -> None:
    a = spec_from_dict(MINIMAL)
    b = spec_from_dict({**MINIMAL, "steps": ["analyze"]})
    c = spec_from_dict({**MINIMAL, "training": {"seq_len": 64}})
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_json_schema_forbids_unknown_fields() -> None:
    schema = PipelineSpec.model_json_schema()
    assert schema["additionalProperties"] is False
    assert "metadata" in schema["required"] and "model" in schema["properties"]


def test_every_spec_field_documents_itself() -> None:
    """`day0 schema` is what editors show: every user-facing field carries a description."""
    from day0.spec.pipeline import PipelineSpec

    schema = PipelineSpec.model_json_schema()
    models = [("PipelineSpec", schema), *schema["$defs"].items()]
    missing = [
        f"{name}.{field}"
        for name, model in models
        for field, prop in model.get("properties", {}).items()
        if "description" not in prop
    ]
    assert not missing, missing
