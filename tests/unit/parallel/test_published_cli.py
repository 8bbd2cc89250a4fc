"""Every published run of tests/data/planner/published_runs.yaml through `day0 plan SPEC --json`: a spec per
run pinning every degree and knob, the step time within 20% of the published one and 8% on average; the
same run with its degrees pinned only, where the planner's own choice is never slower, by its own
estimate, than the published setup. Runs the model misses carry `miss:` in the table with the cause
found; they are expected to miss (strict: one that comes within 20% fails until its mark is removed).

The CLI runs in this process (`cli.main.main`): about 0.1 s a plan, so the 64 runs take seconds."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from day0.steps.optimize.techniques import _MIN_GAIN
from tests.fixtures.published import (
    HARDWARE,
    MISSES,
    RUNS,
    degrees_spec,
    pinned_spec,
    plan_cli,
    predict,
    remember_structures,
    structure,
)

ASSERTED = [r for r in RUNS if r.id not in MISSES]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("published")
    remember_structures(root / "store")
    return root


@cache
def _cli(run_id: str, folder: Path) -> tuple[float, float, float, frozenset]:
    """(published step, `day0 plan` of the fully pinned spec, of the degrees-only spec, in seconds; the
    communication settings where the two chosen plans differ)."""
    run = next(r for r in RUNS if r.id == run_id)
    api, hw = predict(run_id), HARDWARE[run.hardware]
    assert api.chosen is not None and api.published_step_s, f"{run_id}: {api.message}"
    pinned = plan_cli(pinned_spec(run, hw, api.chosen, folder / "store"), folder)
    free = plan_cli(degrees_spec(run, hw, api.chosen, folder / "store"), folder)
    assert pinned["plans"][0]["rank"] == 1 and len(pinned["plans"]) == 1, "a fully pinned spec is one plan"
    a, b = pinned["chosen"]["communication"], free["chosen"]["communication"]
    differ = frozenset(k for k in a if a[k] != b.get(k))
    return api.published_step_s, pinned["step4"]["step_after_s"], free["step4"]["step_after_s"], differ


def _error(run_id: str, folder: Path) -> float:
    published, pinned, *_ = _cli(run_id, folder)
    return (pinned - published) / published


def _moe(runs: list) -> int:
    return sum(structure(r.model).moe is not None for r in runs)


def test_the_set_spans_sources_models_and_platforms() -> None:
    """At least 30 runs from 8 independent sources, 8 of them MoE, on NVIDIA and Ascend, each with its source."""
    assert len(RUNS) >= 30 and len({r.source for r in RUNS}) >= 8 and _moe(RUNS) >= 8
    assert any(r.hardware.startswith("ascend") for r in RUNS)
    for r in RUNS:
        assert r.source and ("step_s" in r.published or r.derived), r.id


def test_the_runs_within_the_bound_span_sources_and_platforms() -> None:
    """Within 20%: at least 30 runs, from 8 sources, 8 of them MoE, on a non-NVIDIA platform too (the runs
    that miss say why in the table)."""
    assert len(ASSERTED) >= 30, len(ASSERTED)
    assert len({r.source for r in ASSERTED}) >= 8, {r.source for r in ASSERTED}
    assert _moe(ASSERTED) >= 8, [r.id for r in ASSERTED if structure(r.model).moe is not None]
    assert any(r.hardware.startswith("ascend") for r in ASSERTED)


@pytest.mark.parametrize(
    "run_id",
    [
        pytest.param(r.id, marks=pytest.mark.xfail(reason=MISSES[r.id], strict=True)) if r.id in MISSES else r.id
        for r in RUNS
    ],
)
def test_a_fully_pinned_spec_through_day0_plan_is_within_20_percent(run_id: str, folder: Path) -> None:
    published, pinned, *_ = _cli(run_id, folder)
    error = (pinned - published) / published
    assert abs(error) <= 0.20, f"{run_id}: day0 plan {pinned:.2f} s, published {published:.2f} s ({error:+.1%})"


def test_mean_error_of_the_runs_within_the_bound(folder: Path) -> None:
    """Issue 25's 8%: measured 7.2% over the 58 runs within 20% (14.7% over all 80, misses included)."""
    errors = {r.id: _error(r.id, folder) for r in ASSERTED}
    mean = sum(abs(e) for e in errors.values()) / len(errors)
    assert mean <= 0.08, f"mean |error| {mean:.1%}: " + ", ".join(f"{k} {v:+.1%}" for k, v in errors.items())


@pytest.mark.parametrize("run_id", [r.id for r in RUNS])
def test_with_the_degrees_only_the_planners_choice_is_never_slower(run_id: str, folder: Path) -> None:
    """The planner's own knobs on the published degrees, by its own estimate, against the published knobs.
    The one allowance is step 4's own rule: a lossy technique (fp8 MoE dispatch, bf16 gradient reduction)
    the published setup uses is declined when it saves under 1% (`techniques._MIN_GAIN`)."""
    _, pinned, free, differ = _cli(run_id, folder)
    lossy = differ and differ <= {"dispatch_dtype", "grad_reduce_dtype"}
    bound = pinned * (1 + (_MIN_GAIN if lossy else 1e-9))
    assert free <= bound, f"{run_id}: own choice {free:.3f} s, published setup {pinned:.3f} s ({sorted(differ)} differ)"
