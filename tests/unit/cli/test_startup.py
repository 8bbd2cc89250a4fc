"""What the command line does for its start-up: `cli._plugins` skips pydantic's entry-point scan only where
no plugin is installed (an installed pydantic plugin still sees every validation), and `main()` freezes
the garbage collector's view of what the imports built only when it is the process's command."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO as ROOT

_PROBE = """
import json, sys
import cli
from pydantic import BaseModel
class M(BaseModel):
    x: int
M(x=1)
loader = getattr(sys.modules["pydantic.plugin._loader"], "__file__", None)  # None: the stand-in
print(json.dumps({"metadata": "importlib.metadata" in sys.modules, "loader": loader}))
"""

# A pydantic plugin as a distribution declares one (an entry point of the group `pydantic`).
_PLUGIN = """
class _OnValidatePython:
    def on_enter(self, input, **kwargs):
        print("plugin saw", input)

class _Plugin:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, settings):
        return _OnValidatePython(), None, None

plugin = _Plugin()
"""


def _probe(*path: Path) -> tuple[dict, str]:
    env_path = ":".join(str(p) for p in (*path, ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": env_path},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    *before, last = proc.stdout.strip().splitlines()
    return json.loads(last), "\n".join(before)


def test_without_a_plugin_importlib_metadata_is_not_imported() -> None:
    probe, printed = _probe()
    assert probe == {"metadata": False, "loader": None} and printed == ""


def test_an_installed_plugin_still_runs(tmp_path: Path) -> None:
    (tmp_path / "recorder_plugin.py").write_text(_PLUGIN)
    info = tmp_path / "recorder_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: recorder-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nrecorder = recorder_plugin:plugin\n")
    probe, printed = _probe(tmp_path)
    assert probe["metadata"] and probe["loader"].endswith("pydantic/plugin/_loader.py")
    assert printed == "plugin saw {'x': 1}"


def test_main_called_in_process_leaves_the_collector_alone(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    frozen = gc.get_freeze_count()
    assert main(["schema"]) == 0 and json.loads(capsys.readouterr().out)
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize(
    ("argv", "collecting"),
    [(["schema"], False), (["plan", "spec.yaml"], False), (["run", "spec.yaml"], True), (["webhook", "serve"], True)],
)
def test_a_brief_command_runs_without_collections_a_long_one_with(argv: list[str], collecting: bool) -> None:
    """`cli.run` keeps the collector off while the imports build what lives as long as the process, and
    `main()` freezes that; a long command (a run, the receiver) then collects again, a brief one does not."""
    probe = (
        "import gc, json, sys, cli, cli.main\n"
        "cli.main._dispatch = lambda args: print(json.dumps([gc.isenabled(), gc.get_freeze_count() > 1000])) or 0\n"
        f"sys.argv = ['day0', *{argv!r}]\n"
        "sys.exit(cli.run())\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [collecting, True]


# What `day0 plan` imports (the command line, the spec, the planner and its results).
_PLAN_IMPORTS = """
import json, sys, cli.main, cli.plan, day0.planner.profile, day0.steps.parallel.plan
from pydantic import BaseModel
from pydantic.dataclasses import is_pydantic_dataclass
def models(module):
    return [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__
            and (issubclass(v, BaseModel) or is_pydantic_dataclass(v))]
found = {n: getattr(m, "annotations", None) is not None for n, m in list(sys.modules.items())
         if n.split(".")[0] in ("day0", "cli") and models(m)}
print(json.dumps(found))
"""


def test_model_modules_on_the_plans_path_evaluate_their_annotations_as_python_does() -> None:
    """`from __future__ import annotations` turns every field's annotation into a string that pydantic
    compiles when it builds the model: 2-3% of `day0 plan`'s start-up over these modules."""
    proc = subprocess.run([sys.executable, "-c", _PLAN_IMPORTS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert len(found) > 12 and "day0.spec.pipeline" in found
    stringified = sorted(name for name, future in found.items() if future)
    assert not stringified, stringified
