"""A model that needs its repo's own code, laid out as a hub snapshot offline: trusted (its org in
`model.trusted_orgs`), it passes steps 1 and 2 (the whole-model check builds it too); untrusted, every
command refuses it with exit 2 before building anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from day0.spec.pipeline import ModelSpec, load_platform
from day0.steps.analyze.run import analyze_model
from day0.steps.operators.checks import run_operators
from day0.steps.operators.layers import WholeModel
from tests.fixtures.cli import day0
from tests.fixtures.model import make_hub_cache

SOURCE = "hf://acme/tiny-remote@main"
CONFIG = {
    "model_type": "acme_llama",
    "architectures": ["AcmeForCausalLM"],
    "auto_map": {
        "AutoConfig": "configuration_acme.AcmeConfig",
        "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM",
    },
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 128,
}
CONFIGURATION = (
    "from transformers import LlamaConfig\n\n\nclass AcmeConfig(LlamaConfig):\n    model_type = 'acme_llama'\n"
)
MODELING = (
    "from transformers import LlamaForCausalLM\n\nfrom .configuration_acme import AcmeConfig\n\n\n"
    "class AcmeForCausalLM(LlamaForCausalLM):\n    config_class = AcmeConfig\n"
)


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    snapshot = make_hub_cache(tmp_path / "hub", "acme/tiny-remote", CONFIG)
    (snapshot / "configuration_acme.py").write_text(CONFIGURATION)
    (snapshot / "modeling_acme.py").write_text(MODELING)
    monkeypatch.setenv("DAY0_HUB_CACHE_DIR", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def test_trusted_remote_code_passes_steps_1_and_2(hub: Path) -> None:
    cpu = load_platform("cpu")
    model = ModelSpec(source=SOURCE, trust_remote_code=True, trusted_orgs=["acme"])
    analyzed = analyze_model(model, cpu, "fp32")
    assert analyzed.model.trust_remote_code and analyzed.structure.architecture == "AcmeForCausalLM"
    assert analyzed.verdict in ("pass", "warn")
    checked = run_operators(analyzed.inventory, cpu, None, "fp32", whole_model=WholeModel.from_analysis(analyzed))
    assert checked.verdict in ("pass", "warn"), checked.reasons
    assert checked.layers is not None and checked.layers.error is None, "the whole-model check built the remote code"


@pytest.mark.parametrize("command", ["validate", "run", "plan"])
def test_untrusted_remote_code_is_refused_by_every_command(hub: Path, tmp_path: Path, command: str) -> None:
    spec = {
        "metadata": {"name": "remote"},
        "platform": "cpu",
        "storage": f"file://{tmp_path}/store",
        "model": {"source": SOURCE, "trust_remote_code": True, "trusted_orgs": ["someone-else"]},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = day0(command, path, env={"PREFECT_HOME": str(tmp_path / "prefect")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "trusted_orgs" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "store").exists()


def test_remote_code_off_is_refused_by_analyze(hub: Path) -> None:
    proc = day0("analyze", SOURCE, env={"DAY0_HUB_CACHE_DIR": str(hub)})
    assert proc.returncode == 2 and "trust_remote_code" in proc.stderr, proc.stderr[-2000:]
