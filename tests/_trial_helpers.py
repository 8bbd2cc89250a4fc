"""Shared tiny trial configuration for the step-5 tests (hidden 64, 2 layers, 4 experts, seq 32)."""

from __future__ import annotations

from functools import lru_cache

from day0.model.source import resolve_model_source
from day0.steps.trial.config import TrialScale
from day0.steps.trial.data import TokenData, prepare_data
from day0.steps.trial.loop import LoopConfig
from day0.steps.trial.model import scale_config

TINY = TrialScale(layers=2, hidden=64, experts=4)


@lru_cache(maxsize=1)
def tiny_data() -> TokenData:
    return prepare_data(None, 512)


def tiny_loop(steps: int = 24, **overrides) -> LoopConfig:
    data = tiny_data()
    cfg = scale_config(
        resolve_model_source("tiny-deepseek-v3").config,
        TINY,
        vocab_size=data.vocab_size,
        seq_len=32,
        eos_token_id=data.eos_token_id,
    )
    fields = dict(
        model_config_dict=cfg,
        seed=0,
        steps=steps,
        global_batch=4,
        micro_batch=4,
        seq_len=32,
        learning_rate=3e-3,
        lr_warmup_steps=2,
        checkpoint_every=5,
    )
    return LoopConfig(**(fields | overrides))


def long_trial_spec(name: str, storage: str) -> dict:
    """A spec whose step 5 trains on Ray for minutes: it is still training when a test stops the run."""
    return {
        "metadata": {"name": name},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "cluster": "local",
        "steps": ["analyze", "parallel", "optimize", "trial"],
        "storage": storage,
        "trial": {"steps": 400, "workers": 2, "seq_len": 32, "micro_batch": 2},
    }
