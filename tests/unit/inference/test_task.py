"""What the inference task composes from other steps (no serving): the served model is the trial's
scaled-down model, or step 5's trained checkpoint when there is one, and its weights are loaded."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from day0.errors import UsageError
from day0.model.source import resolve_model_source
from day0.spec.pipeline import spec_from_dict
from day0.steps.inference.model import build_served_model


def _spec():  # type: ignore[no-untyped-def]
    return spec_from_dict(
        {"metadata": {"name": "x"}, "model": "tiny-qwen3-moe", "platform": "cpu",
         "trial": {"scale": {"layers": 1, "hidden": 64, "experts": 4}, "seed": 3, "seq_len": 64}}
    )  # fmt: skip


def test_without_a_trial_the_scaled_down_model_is_served() -> None:
    from day0.steps.inference.run import served_model

    analyzed = SimpleNamespace(model=resolve_model_source("tiny-qwen3-moe"))
    served = served_model(_spec(), analyzed, None)  # type: ignore[arg-type]  # a stand-in with the field it reads
    assert served.checkpoint is None and served.seed == 3 and "untrained" in served.label
    cfg = served.config
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_experts"]) == (1, 64, 4)
    assert cfg["vocab_size"] == 512 and (Path(served.tokenizer) / "tokenizer.json").is_file()


def test_the_trials_checkpoint_is_served_with_its_weights(tmp_path: Path) -> None:
    from day0.steps.inference.run import served_model

    analyzed = SimpleNamespace(model=resolve_model_source("tiny-qwen3-moe"))
    untrained = served_model(_spec(), analyzed, None)  # type: ignore[arg-type]  # as above
    trained_weights = build_served_model(untrained.model_copy(update={"seed": 99})).state_dict()
    torch.save(trained_weights, tmp_path / "model.pt")
    trained = SimpleNamespace(runs=[SimpleNamespace(role="reference", checkpoint_path="elsewhere"),
                                    SimpleNamespace(role="candidate", checkpoint_path=str(tmp_path))])  # fmt: skip
    served = served_model(_spec(), analyzed, trained)  # type: ignore[arg-type]  # as above
    assert served.checkpoint == str(tmp_path) and "trained checkpoint" in served.label
    loaded = build_served_model(served).state_dict()
    fresh = build_served_model(untrained).state_dict()
    name = "model.layers.0.mlp.experts.gate_up_proj"
    assert torch.equal(loaded[name], trained_weights[name]) and not torch.equal(loaded[name], fresh[name])


def test_a_full_size_model_without_trial_scale_is_refused_naming_the_field() -> None:
    from day0.steps.inference.run import served_model

    spec = spec_from_dict({"metadata": {"name": "x"}, "model": "deepseek-v3", "platform": "cpu"})
    served = served_model(spec, SimpleNamespace(model=resolve_model_source("deepseek-v3")), None)  # type: ignore[arg-type]  # a stand-in
    with pytest.raises(UsageError, match=r"trial\.scale: the served model would have 6\d\d\.\dB parameters"):
        build_served_model(served)


def test_the_tokenizer_travels_through_the_runs_store_never_as_a_host_path(tmp_path: Path) -> None:
    from day0.runs.context import RunContext
    from day0.steps.inference.model import load_tokenizer
    from day0.steps.inference.run import publish_tokenizer, served_model

    spec = spec_from_dict(_spec().model_dump(mode="json") | {"storage": f"file://{tmp_path / 'store'}"})
    ctx = RunContext.create(spec)
    local = Path(served_model(spec, SimpleNamespace(model=resolve_model_source("tiny-qwen3-moe")), None).tokenizer)  # type: ignore[arg-type]  # a stand-in
    url = publish_tokenizer(ctx, local)
    assert url.startswith(f"file://{tmp_path / 'store'}") and url.endswith("/inference/tokenizer")
    assert str(local) not in url
    stored = ctx.store.list(ctx.key("inference", "tokenizer"))
    assert any(k.endswith("/tokenizer.json") for k in stored) and not any(k.endswith(".npy") for k in stored)
    text = "def f(x):\n    return x + 1"
    assert load_tokenizer(url)(text)["input_ids"] == load_tokenizer(local)(text)["input_ids"]
    empty = f"file://{tmp_path / 'nothing-here'}"
    with pytest.raises(UsageError, match=r"no tokenizer.json in file://.*nothing-here"):
        load_tokenizer(empty)
