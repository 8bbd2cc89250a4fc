"""validate == run for the refusals a step makes when it runs (issue 42, item 6): each bad input a step
would refuse minutes into `day0 run` (step 6 serving on an NPU, a missing dataset or reference curve)
is refused by `day0 validate` first, with the same message, and by the flow before its first step
(a run started from a deployment passes no CLI). The steps call the checks `day0.spec.checks` makes,
and a guard lists every other refusal in the steps with why validate cannot make it."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli import main as cli
from day0.errors import Day0Error
from day0.spec.pipeline import PipelineSpec, load_spec
from tests.fixtures.paths import REPO


def _serve(spec: PipelineSpec) -> None:
    from day0.steps.inference.model import ServedModel
    from day0.steps.inference.serve import InferenceRequest, run_inference

    served = ServedModel(label="trial checkpoint", config={}, tokenizer="/nonexistent/tokenizer")
    run_inference(InferenceRequest(model="m", served=served, inference=spec.inference, platform=spec.platform))


def _read_dataset(spec: PipelineSpec) -> None:
    from day0.steps.trial.data import load_text

    load_text(spec.trial.dataset)


def _read_reference(spec: PipelineSpec) -> None:
    from day0.steps.trial.train import _load_curve

    _load_curve(spec.trial.reference, None)


@dataclass
class StepRefusal:
    id: str
    spec: str
    issue: str  # the line both name: "field: message"
    step: Callable[[PipelineSpec], None]  # what the step itself does with the spec when it runs


CASES = [
    StepRefusal(  # the issue's case: validate said ok, run exited 2 after 270 s
        "ascend-910b-serving-auto",
        "platform: ascend-910b\nsteps: [analyze, inference]\n",
        "platform.device_type: serving on 'npu' is not supported yet",
        _serve,
    ),
    StepRefusal(
        "engine-refused",
        "platform: cpu\nsteps: [inference]\ninference: {engine: sglang}\n",
        "inference.engine: 'sglang': SGLang",
        _serve,
    ),
    StepRefusal(
        "engine-on-wrong-device",
        "platform: ascend-910b\nsteps: [inference]\ninference: {engine: transformers}\n",
        "inference.engine: 'transformers' serves on device types ['cpu', 'cuda'], not 'npu'",
        _serve,
    ),
    StepRefusal(
        "dataset-missing",
        "platform: cpu\nsteps: [trial]\ntrial: {dataset: {tmp}/no-such.txt}\n",
        "trial.dataset: '{tmp}/no-such.txt' is not a readable text file",
        _read_dataset,
    ),
    StepRefusal(
        "dataset-file-uri-missing",
        "platform: cpu\nsteps: [trial]\ntrial: {dataset: 'file://{tmp}/gone.txt'}\n",
        "trial.dataset: 'file://{tmp}/gone.txt' is not a readable text file",
        _read_dataset,
    ),
    StepRefusal(
        "reference-missing",
        "platform: cpu\nsteps: [trial]\ntrial: {reference: {tmp}/curve.json}\n",
        "trial.reference: cannot read a curve from '{tmp}/curve.json'",
        _read_reference,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_refuses_what_the_step_refuses(
    case: StepRefusal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.adapt import check_runnable, plan_steps

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "s.yaml"
    body = f"metadata: {{name: refuse}}\nmodel: tiny-deepseek-v3\nstorage: file://{tmp_path}/store\n{case.spec}"
    path.write_text(body.replace("{tmp}", str(tmp_path)))
    issue = case.issue.replace("{tmp}", str(tmp_path))

    capsys.readouterr()
    assert cli.main(["validate", str(path)]) == 2
    assert issue in capsys.readouterr().err

    spec = load_spec(path)
    with pytest.raises(Day0Error) as flow:  # the flow, before its first step
        check_runnable(spec, plan_steps(spec))
    assert issue in str(flow.value)
    with pytest.raises(Day0Error) as step:  # the step itself, had it been reached
        case.step(spec)
    assert issue in str(step.value)


def test_a_fixed_spec_passes_where_the_step_would_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same fields, given a file that exists and a device an engine serves on, are not refused."""
    from day0.spec.checks import check_steps

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "text.txt").write_text("some text")
    (tmp_path / "curve.json").write_text("{}")
    path = tmp_path / "s.yaml"
    path.write_text(
        f"metadata: {{name: ok}}\nmodel: tiny-deepseek-v3\nplatform: cpu\nstorage: file://{tmp_path}/store\n"
        f"trial: {{dataset: {tmp_path}/text.txt, reference: 'file://{tmp_path}/curve.json'}}\n"
    )
    check_steps(load_spec(path), ["trial", "inference"], str(path))


# Refusals the steps make that validate cannot: each needs what only the run has (why, per file).
RUN_ONLY_REFUSALS = {
    "day0/steps/inference/model.py": 3,  # the trial's tokenizer and checkpoint, written by step 5
    "day0/steps/trial/data.py": 2,  # the tokenizer's vocabulary and the dataset's token count: tokenized in the run
    "day0/steps/trial/train.py": 1,  # a reference curve's content (and any s3:// one): read in the run
    "day0/steps/parallel/plan.py": 1,  # planner.profile 'calibrated': the store's profile, read when the plan runs
    # msprobe's standards (validation.msprobe_version): a cached wheel or a snapshot on disk, so not the
    # spec's alone; validate reads them too (cli/preflight.py's check_tolerance), as run does
    "day0/steps/operators/msprobe.py": 4,
    # the engine's environment: a recipe per (engine, device type) that engine_issues' ENGINES already
    # vouches for, and a vendor plugin's wheel, read from the index or the cache when the step builds it
    "day0/steps/inference/engine_env.py": 2,
}


def test_every_step_refusal_is_a_spec_check_or_needs_the_run() -> None:
    """A new `raise UsageError(...)` in a step, not made from `day0.spec.checks`' issues, fails here:
    put its check in `day0.spec.checks` (validate then makes it) or list why only the run can."""
    found: dict[str, int] = {}
    for path in sorted((REPO / "day0" / "steps").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            func, args = node.exc.func, node.exc.args
            if not (isinstance(func, ast.Name) and func.id == "UsageError"):
                continue
            from_checks = bool(args) and "issues" in ast.unparse(args[0])
            if not from_checks:
                name = str(path.relative_to(REPO))
                found[name] = found.get(name, 0) + 1
    assert found == RUN_ONLY_REFUSALS


def test_validate_checks_the_steps_the_flow_plans() -> None:
    """`day0 validate --only X` checks the selected steps; the flow checks the steps it plans (the
    selection and its prerequisites). They agree as long as no step with checks here is planned as a
    prerequisite of another: a step's refusal is then never met by a run that validate did not check."""
    from day0.spec.pipeline import STEPS
    from day0.steps.registry import prerequisites

    checked = ("trial", "inference")  # the steps `check_steps` makes checks for
    assert not [(s, p) for s in STEPS for p in prerequisites(s) if p in checked]
