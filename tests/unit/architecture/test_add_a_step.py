"""The "Adding a seventh step" recipe (docs/development/extending.md), walked: in a copy of the product, a toy
step is added by touching only the places the recipe lists (its folder, one `StepSpec` line in the registry, and the
`Step` literal and its spec section in `day0/spec/pipeline.py`); the spec then accepts its section, the
registry, the spec and the flow's tasks name it, and the flow's step gate runs it into the store and the
run's manifest (its task's function called bare: no Prefect server, no Ray)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures.paths import REPO

PRODUCT = ("day0", "tasks", "flows")
RECIPE_FILES = {  # what the recipe says a step touches
    "day0/steps/toy/__init__.py",
    "day0/steps/toy/config.py",
    "day0/steps/toy/result.py",
    "day0/steps/toy/run.py",
    "day0/steps/registry.py",
    "day0/spec/pipeline.py",
}

TOY = {
    "day0/steps/toy/__init__.py": '"""A toy seventh step."""\n',
    "day0/steps/toy/config.py": (
        "from pydantic import Field\n\nfrom day0.spec.base import UserModel\n\n\n"
        "class ToySpec(UserModel):\n"
        '    greeting: str = Field("hello", description="What the toy step says.")\n'
    ),
    "day0/steps/toy/result.py": (
        "from day0.core.result import Judgement, StepResult\n\n\n"
        "class ToyResult(StepResult):\n"
        '    STEP = "toy"\n'
        "    said: str\n\n"
        "    def judge(self) -> Judgement:\n"
        '        return Judgement(verdict="pass", reasons=[self.said])\n\n'
        "    def to_markdown(self) -> str:\n"
        '        return f"# Toy step\\n\\n{self.said}\\n"\n'
    ),
    "day0/steps/toy/run.py": (
        "from day0.core.result import Progress\n"
        "from day0.runs.context import RunContext\n"
        "from day0.steps.toy.result import ToyResult\n\n\n"
        "def run(ctx: RunContext, progress: Progress) -> ToyResult:\n"
        "    progress(ctx.spec.toy.greeting)\n"
        "    return ToyResult(said=ctx.spec.toy.greeting)\n"
    ),
}

# Run in the copy: the spec with the toy step, the registry's view of it, and the flow's gate running it.
CHECK = """
import functools, json, sys
from day0.runs.context import RunContext
from day0.spec.pipeline import STEPS, load_spec
from day0.steps.registry import REGISTRY, scorecard
from flows._gate import StepGate
from tasks.steps import TASKS

spec = load_spec(sys.argv[1])
ctx = RunContext.create(spec)
ctx.begin_attempt()
gate, results = StepGate(ctx, spec.steps), {}
for step in spec.steps:
    bare = functools.partial(TASKS[step].fn)  # the task's function: no Prefect server
    bare.name = step
    results[step] = gate.run(bare, ctx, results)
manifest = ctx.publish_manifest()
print(json.dumps({
    "steps": list(STEPS), "registry": list(REGISTRY), "tasks": list(TASKS),
    "scorecard": [list(s) for _, s in scorecard()],
    "said": results["toy"].said if results["toy"] else None,
    "records": [(r.step, r.status, r.verdict) for r in manifest.attempts[-1]],
    "stored": sorted(k for k in ctx.store.list(ctx.prefix) if "/toy/" in k),
}))
"""


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for top in PRODUCT
        for p in (root / top).rglob("*.py")
    }


def _follow_the_recipe(tree: Path) -> None:
    for name, text in TOY.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    registry = tree / "day0/steps/registry.py"
    text = registry.read_text()
    text = text.replace(
        "from day0.steps.trial.result import TrialResult\n",
        "from day0.steps.trial.result import TrialResult\nfrom day0.steps.toy import run as toy\n"
        "from day0.steps.toy.result import ToyResult\n",
    )
    last = '        StepSpec("inference", InferenceResult, inference.run, "application (step 6)", inference_job.JOB),\n'
    assert last in text, "the registry's last StepSpec line moved: update this test's recipe"
    registry.write_text(text.replace(last, last + '        StepSpec("toy", ToyResult, toy.run, "toy (step 7)"),\n'))
    pipeline = tree / "day0/spec/pipeline.py"
    text = pipeline.read_text()
    step = 'Step = Literal["analyze", "operators", "parallel", "optimize", "trial", "inference"]'
    section = next(line for line in text.splitlines(keepends=True) if line.startswith("    inference: InferenceSpec"))
    assert step in text and section in text, "the Step literal or the inference section moved: update this test"
    text = text.replace(step, step.replace('"inference"]', '"inference", "toy"]'))
    toy = '    toy: ToySpec = Field(default_factory=ToySpec, description="The toy step.")\n'
    text = text.replace(section, section + toy)
    text = text.replace(
        "from day0.steps.trial.config import TrialSpec\n",
        "from day0.steps.toy.config import ToySpec\nfrom day0.steps.trial.config import TrialSpec\n",
    )
    pipeline.write_text(text)


def test_the_add_a_step_recipe_is_true(tmp_path: Path) -> None:
    page = (REPO / "docs" / "development" / "extending.md").read_text()
    recipe = " ".join(page.split("**Adding a seventh step**", 1)[1].split("\n\n", 1)[0].split())
    for place in ("`day0/steps/<name>/`", "`config.py`", "`result.py`", "`run.py`", "`day0/steps/registry.py`"):
        assert place in recipe, f"the recipe (docs/development/extending.md) no longer names {place}: update this test"
    assert "`day0/spec/pipeline.py`" in recipe and "touches three places" in recipe

    tree = tmp_path / "tree"
    for top in PRODUCT:
        shutil.copytree(REPO / top, tree / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "configs", tree / "configs")  # the platforms and models the spec names
    before = _digests(tree)
    _follow_the_recipe(tree)
    after = _digests(tree)
    touched = {name for name in after if before.get(name) != after[name]}
    assert touched == RECIPE_FILES, touched ^ RECIPE_FILES

    spec = tmp_path / "toy.yaml"
    spec.write_text(
        "metadata: {name: toy}\nmodel: tiny-deepseek-v3\nplatform: cpu\nsteps: [toy]\n"
        f"toy: {{greeting: hi from step 7}}\nstorage: file://{tmp_path}/store\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(spec)],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["steps"][-1] == seen["registry"][-1] == seen["tasks"][-1] == "toy"
    assert ["toy"] in seen["scorecard"], seen["scorecard"]
    assert seen["said"] == "hi from step 7"
    assert seen["records"] == [["toy", "executed", "pass"]], seen["records"]
    assert any(k.endswith("toy/result.json") for k in seen["stored"]), seen["stored"]
