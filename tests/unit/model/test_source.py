"""Model sources: configs/ names, local dirs, and hf:// against a local hub-cache snapshot, offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from day0.errors import ModelError
from day0.model.build import load_hf_config
from day0.model.source import resolve_model_source
from day0.settings import HubSettings
from tests.fixtures.model import make_hub_cache
from tests.fixtures.paths import REPO


def test_hf_source_resolves_from_hub_cache_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = json.loads((REPO / "configs/models/deepseek-v3/config.json").read_text())
    snapshot = make_hub_cache(tmp_path, "deepseek-ai/DeepSeek-V3", config)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model_source("hf://deepseek-ai/DeepSeek-V3@main", HubSettings(cache_dir=tmp_path))
    assert resolved.directory == snapshot
    assert resolved.repo_id == "deepseek-ai/DeepSeek-V3" and resolved.org == "deepseek-ai"
    assert resolved.config["n_routed_experts"] == 256
    assert load_hf_config(resolved).model_type == "deepseek_v3"


def test_hf_source_missing_revision_offline_is_a_clear_error(tmp_path: Path) -> None:
    make_hub_cache(tmp_path, "org/model", {"model_type": "llama"})
    with pytest.raises(ModelError, match="not in the local hub cache and the hub is offline"):
        resolve_model_source("hf://org/model@v2", HubSettings(cache_dir=tmp_path, offline=True))


def test_bad_hf_reference() -> None:
    with pytest.raises(ModelError, match=r"expected hf://org/name"):
        resolve_model_source("hf://just-a-name", HubSettings(offline=True))


def test_local_dir_and_named_config(tmp_path: Path) -> None:
    shutil.copy(REPO / "configs/models/llama-3-8b/config.json", tmp_path / "config.json")
    assert resolve_model_source(str(tmp_path)).config["model_type"] == "llama"
    assert resolve_model_source("mixtral-8x7b").config["num_local_experts"] == 8


@pytest.mark.parametrize(
    "content, field, message",
    [
        ("{not json", "config.json", "malformed JSON"),
        ('{"hidden_size": 8}', "model_type", "no model_type"),
        ('{"model_type": "llama", "hidden_size": -4}', "hidden_size", "positive integer"),
        ('{"model_type": "no-such-arch"}', "model_type", "unknown architecture"),
        ('{"model_type": "custom-arch", "auto_map": {"AutoConfig": "x.Config"}}', "model_type", "trust_remote_code"),
        (
            '{"model_type": "mamba2", "num_heads": 8, "head_dim": 16, "hidden_size": 64}',
            "num_attention_heads",
            "no attention layers",
        ),
        ('{"model_type": "rwkv"}', "num_attention_heads", "'rwkv' has no attention layers"),
        (
            '{"model_type": "mamba2", "num_heads": 8, "head_dim": 16}',
            "config.json",
            "refuses this config: Class validation error .* Inconsistent configuration",
        ),
    ],
)
def test_malformed_configs_name_the_field(tmp_path: Path, content: str, field: str, message: str) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(ModelError, match=message) as info:
        load_hf_config(resolve_model_source(str(tmp_path)))
    assert info.value.field == field and str(tmp_path) in str(info.value)


def test_unknown_source_lists_known_models() -> None:
    with pytest.raises(ModelError, match="deepseek-v3"):
        resolve_model_source("not-a-model")


def test_remote_code_needs_a_trusted_org(tmp_path: Path) -> None:
    from day0.model.source import remote_code_allowed
    from day0.spec.pipeline import ModelSpec

    make_hub_cache(tmp_path, "acme/new-model", {"model_type": "llama"})
    resolved = resolve_model_source("hf://acme/new-model@main", HubSettings(cache_dir=tmp_path, offline=True))
    assert not remote_code_allowed(ModelSpec(source="hf://acme/new-model"), resolved)
    assert remote_code_allowed(ModelSpec(source="x", trust_remote_code=True, trusted_orgs=["acme"]), resolved)
    with pytest.raises(ModelError, match="not in trusted_orgs") as info:
        remote_code_allowed(ModelSpec(source="x", trust_remote_code=True, trusted_orgs=["other"]), resolved)
    assert info.value.field == "model.trusted_orgs"
