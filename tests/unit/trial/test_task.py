"""What the trial task composes from other steps and the environment (no training): the plan's
knobs from step 4 (else step 3), step 3's cost model applied to the trial configuration, and
test-only faults read from `DAY0_TRIAL_FAULTS`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from day0.errors import UsageError
from day0.paths import CONFIGS_DIR
from day0.spec.pipeline import load_spec
from day0.steps.trial.faults import FaultDrillSettings, TrialFaults
from day0.steps.trial.train import TrialPlan
from tests.fixtures.trial import tiny_loop


def test_plan_from_step_results() -> None:
    from day0.planner.results import MemoryKnobs
    from day0.steps.trial.run import plan_from_results

    assert plan_from_results(None, None).model_dump() == {"recompute": "none", "sharding": "ddp", "source": "default"}

    def with_knobs(recompute: str, zero: int) -> SimpleNamespace:
        return SimpleNamespace(memory_knobs=MemoryKnobs(recompute=recompute, zero_stage=zero, offload="none"))

    optimized = SimpleNamespace(plan=with_knobs("selective", 3))
    planned = SimpleNamespace(best=with_knobs("full", 1))
    plan = plan_from_results(optimized, planned)  # type: ignore[arg-type]  # stand-ins with the fields it reads
    assert (plan.recompute, plan.sharding, plan.source) == ("selective", "fsdp", "step 4 plan")
    plan = plan_from_results(SimpleNamespace(plan=None), planned)  # type: ignore[arg-type]  # as above
    assert (plan.recompute, plan.sharding, plan.source) == ("full", "ddp", "step 3 best plan")


def test_planner_memory_estimate_of_the_trial_configuration() -> None:
    from day0.steps.trial.run import PlannerMemoryEstimate

    estimate = PlannerMemoryEstimate(load_spec(CONFIGS_DIR / "pipelines" / "tiny-local.yaml").platform.hardware)
    loop = tiny_loop(micro_batch=2)
    ddp = estimate(loop.model_config_dict, TrialPlan(), loop, 2)
    fsdp = estimate(loop.model_config_dict, TrialPlan(sharding="fsdp"), loop, 2)
    assert ddp and fsdp and 0 < fsdp < ddp < 2**30  # ZeRO-3 shards what DDP replicates; a tiny model
    assert "step 3 cost model" in estimate.source


def test_faults_come_from_the_environment_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAY0_TRIAL_FAULTS", raising=False)
    assert FaultDrillSettings().trial_faults is None
    monkeypatch.setenv("DAY0_TRIAL_FAULTS", '{"nan_at_step": 5, "lr_multiplier": 10}')
    faults = FaultDrillSettings().trial_faults
    assert faults == TrialFaults(nan_at_step=5, lr_multiplier=10.0)
    assert faults.describe() == "TrialFaults(lr_multiplier=10.0, nan_at_step=5)"
    monkeypatch.setenv("DAY0_TRIAL_FAULTS", '{"nan_at_stp": 5}')
    with pytest.raises(UsageError, match=r"DAY0_TRIAL_FAULTS\.nan_at_stp: Extra inputs"):
        FaultDrillSettings()
