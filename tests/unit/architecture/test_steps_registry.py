"""The step registry against the spec and the step folders: the same steps in the same order, each
folder with the same files, results read only from earlier steps, every step on the scorecard once."""

from __future__ import annotations

import inspect

from day0.paths import CONFIGS_DIR
from day0.spec.pipeline import STEPS, load_spec
from day0.steps.registry import REGISTRY, needs, pods_needed, scorecard
from tasks.steps import TASKS
from tests.fixtures.paths import REPO

STEPS_DIR = REPO / "day0" / "steps"


def test_the_registry_and_the_spec_name_the_same_steps_in_order() -> None:
    assert tuple(REGISTRY) == STEPS
    assert tuple(TASKS) == STEPS and all(TASKS[s].name == s for s in STEPS)


def test_every_step_is_a_folder_of_the_same_shape() -> None:
    folders = sorted(p.name for p in STEPS_DIR.iterdir() if p.is_dir() and not p.name.startswith("_"))
    assert folders == sorted(STEPS)
    for name, spec in REGISTRY.items():
        files = {p.name for p in (STEPS_DIR / name).glob("*.py")}
        assert {"__init__.py", "result.py", "run.py"} <= files, name
        assert ("job.py" in files) == (spec.job is not None), f"{name}: job.py and the registry's job disagree"
        assert spec.run.__module__ == f"day0.steps.{name}.run" and spec.run.__name__ == "run"
        assert name == spec.result.STEP
        if spec.job is not None:
            assert spec.job.module == f"day0.steps.{name}.job"


def test_a_step_reads_only_earlier_steps_after_ctx_and_progress() -> None:
    for position, (name, spec) in enumerate(REGISTRY.items()):
        assert list(inspect.signature(spec.run).parameters)[:2] == ["ctx", "progress"], name
        for need in needs(name):
            assert STEPS.index(need.step) < position, f"{name} reads {need.step}, which runs after it"
    assert [(n.step, n.required) for n in needs("trial")] == [
        ("analyze", True),
        ("parallel", True),
        ("optimize", True),
        ("operators", False),  # its adaptations, when step 2 passed
    ]


def test_the_scorecard_and_the_pods_come_from_the_registry() -> None:
    rows = scorecard()
    assert [s for _, steps in rows for s in steps] == list(STEPS), "every step on the scorecard once, in order"
    assert rows[0] == ("numerical (steps 1-2)", ("analyze", "operators"))
    spec = load_spec(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    spec = spec.model_copy(update={"trial": spec.trial.model_copy(update={"workers": 5})})
    assert pods_needed(spec, ["analyze", "parallel"]) == 1  # at least one, though neither asks
    assert pods_needed(spec, list(STEPS)) == 5 == REGISTRY["trial"].pods(spec)
