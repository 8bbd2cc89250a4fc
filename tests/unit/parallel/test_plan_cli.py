"""`day0 plan SPEC [--json] [--top N] [--out FILE]` through its argparse command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from cli.plan import add_plan_command
from tests.fixtures import paths

DATA = paths.DATA / "planner"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="day0")
    add_plan_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def test_table_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.yaml"
    assert run([str(DATA / "deepseek-v3-2048-h800.yaml"), "--top", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    ranks = [line.split("|")[1].strip() for line in text.split("## Memory")[0].splitlines() if line.startswith("| ")]
    assert "| # | TP | PP |" in text and "3" in ranks and "4" not in ranks
    assert "Step 4" in text
    doc = yaml.safe_load(out.read_text())
    assert doc["parallel"]["tensor_parallel"] <= 8
    assert doc["memory"]["recompute"] in ("none", "selective", "full")
    assert doc["precision"] == {"master_weights": "fp32", "compute": "bf16"}
    assert set(doc["communication"]) >= {"tp_overlap", "ep_overlap", "dp_overlap"}


def test_json_lists_ranked_plans_with_breakdowns(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(DATA / "deepseek-v3-2048-h800.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    plans = doc["plans"]
    assert len(plans) >= 10 and doc["feasible"] is True
    assert [p["rank"] for p in plans] == list(range(1, len(plans) + 1))
    first = plans[0]
    assert first["feasible"] is True and first["reason"] is None
    assert first["memory"]["total_bytes"] <= first["memory"]["capacity_bytes"] == 80 * 1024**3
    assert {"weights_bytes", "gradients_bytes", "optimizer_states_bytes", "activations_bytes"} <= set(first["memory"])
    assert {"step_s", "tokens_per_s", "mfu"} <= set(first["time"])
    assert {"tensor_parallel", "pipeline_parallel", "expert_parallel", "data_parallel"} <= set(first["parallel"])


def test_infeasible_setup_exits_zero_with_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.yaml"
    assert run([str(DATA / "deepseek-v3-8-h800.yaml"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "infeasible" in text and "needs at least" in text
    doc = yaml.safe_load(out.read_text())
    assert doc["feasible"] is False and doc["min_accelerators"] >= 150


def test_infeasible_json_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(DATA / "deepseek-v3-8-h800.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["feasible"] is False and doc["plans"] == []
    closest = doc["closest_infeasible"][0]
    assert closest["feasible"] is False and "GiB per accelerator" in closest["reason"]


def test_bad_spec_is_a_usage_error(tmp_path: Path) -> None:
    from day0.errors import SpecError

    bad = tmp_path / "bad.yaml"
    bad.write_text("metadata: {name: x}\nmodel: deepseek-v3\nplatform: h800\ntraining: {seq_len: 0}\n")
    with pytest.raises(SpecError, match="seq_len"):
        run([str(bad)])


def test_wired_into_day0_cli(tmp_path: Path) -> None:
    from cli import main as cli

    assert cli.main(["plan", str(DATA / "deepseek-v3-8-h800.yaml"), "--out", str(tmp_path / "p.yaml")]) == 0
    assert (tmp_path / "p.yaml").exists()


def test_parallel_and_optimize_tasks_store_results_and_resume(tmp_path: Path, prefect_server: None) -> None:
    from pydantic import BaseModel

    from day0.model.structure import ModelStructure
    from day0.paths import CONFIGS_DIR
    from day0.runs.context import RunContext
    from day0.spec.pipeline import load_yaml, spec_from_dict
    from tasks.steps import TASKS

    class Analyzed(BaseModel):  # the part of step 1's AnalyzeResult that steps 3-4 read
        structure: ModelStructure

    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    raw["storage"] = f"file://{tmp_path}"
    raw["planner"] = {"calibrate": False}  # the tasks' files and reuse; integration/test_adapt_flow.py calibrates
    ctx = RunContext.create(spec_from_dict(raw))
    analyzed = Analyzed(
        structure=ModelStructure.model_validate_json((DATA / "tiny-deepseek-v3.structure.json").read_text())
    )
    plans = TASKS["parallel"].fn(ctx, analyzed=analyzed)
    assert plans.feasible and plans.best.parallel.accelerators == 1
    optimized = TASKS["optimize"].fn(ctx, analyzed=analyzed, planned=plans)
    assert optimized.plan is not None and optimized.plan.feasible
    store = ctx.store
    for step, name in (("parallel", "plan.yaml"), ("parallel", "result.md"), ("optimize", "optimized-plan.yaml")):
        assert store.exists(ctx.key(step, name)), (step, name)
    assert TASKS["parallel"].fn(ctx, analyzed=analyzed).model_dump() == plans.model_dump()  # reused, not recomputed


def _spec_in(tmp_path: Path, storage: str | None = None) -> Path:
    """deepseek-v3-8-h800 with its store under tmp_path, holding the model's structure (no meta build)."""
    from cli.plan import remember_structure
    from day0.model.source import resolve_model
    from day0.model.structure import ModelStructure
    from day0.spec.pipeline import load_spec
    from day0.store import open_store

    raw = yaml.safe_load((DATA / "deepseek-v3-8-h800.yaml").read_text())
    raw["storage"] = storage or f"file://{tmp_path}/store"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    if storage is None:
        spec = load_spec(path)
        structure = ModelStructure.model_validate_json((DATA / "deepseek-v3.structure.json").read_text())
        remember_structure(open_store(spec.storage), resolve_model(spec.model), structure)
    return path


def test_replanning_goes_to_the_store_beside_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The edit-and-replan loop: no --out, no --force, and a second plan replaces the first, saying so."""
    from day0.runs.context import RunContext
    from day0.spec.pipeline import load_spec

    path = _spec_in(tmp_path)
    key = RunContext.create(load_spec(path)).key("plan.yaml")
    assert run([str(path)]) == 0
    first = capsys.readouterr()
    assert f"plan written to file://{tmp_path}/store/{key}" in first.out and "replacing" not in first.err
    stored = tmp_path / "store" / key
    assert stored.read_text().startswith("# day0 plan: deepseek-v3-8-h800 from ")
    assert yaml.safe_load(stored.read_text())["feasible"] is False
    assert run([str(path)]) == 0
    second = capsys.readouterr()
    assert f"plan written to file://{tmp_path}/store/{key}" in second.out
    assert f"note: replacing the earlier plan at file://{tmp_path}/store/{key}" in second.err
    assert run([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == f"file://{tmp_path}/store/{key}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml", "store"], "nothing written beside the spec"


def test_out_replaces_its_own_plan_and_refuses_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from day0.errors import UsageError

    path, out = _spec_in(tmp_path), tmp_path / "p.yaml"
    assert run([str(path), "--out", str(out)]) == 0
    assert "replacing" not in capsys.readouterr().err
    assert run([str(path), "--out", str(out)]) == 0
    assert f"note: replacing {out} (an earlier day0 plan)" in capsys.readouterr().err
    out.write_text("mine\n")
    with pytest.raises(UsageError, match="exists and is not a plan day0 plan wrote; pass --force"):
        run([str(path), "--out", str(out)])
    assert out.read_text() == "mine\n"
    assert run([str(path), "--out", str(out), "--force"]) == 0
    assert f"note: overwriting {out} (--force)" in capsys.readouterr().err
    assert out.read_text().startswith("# day0 plan: ")


def test_unreachable_store_plans_to_out_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import plan as plan_cli
    from day0.errors import StoreUnavailable
    from day0.model.structure import ModelStructure

    for name, value in {
        "DAY0_STORE_ENDPOINT_URL": "http://127.0.0.1:9",
        "DAY0_STORE_ACCESS_KEY_ID": "k",
        "DAY0_STORE_SECRET_ACCESS_KEY": "s",
        "AWS_MAX_ATTEMPTS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    structure = ModelStructure.model_validate_json((DATA / "deepseek-v3.structure.json").read_text())
    monkeypatch.setattr(plan_cli, "build_structure", lambda resolved: structure)
    path = _spec_in(tmp_path, storage="s3://bucket/x")
    with pytest.raises(StoreUnavailable, match=r"cannot reach bucket .*unless --out FILE is given"):
        run([str(path)])
    out = tmp_path / "p.yaml"
    assert run([str(path), "--out", str(out)]) == 0
    assert "planning without its structure cache or calibrated profile" in capsys.readouterr().err
    assert yaml.safe_load(out.read_text())["feasible"] is False


def test_the_structure_cache_is_keyed_by_the_code_that_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix to the structure analysis must recount, not serve the structure the old code counted; while
    its files are unchanged (time and size), the recorded digest holds without parsing them again."""
    import day0.provenance
    from cli.plan import cached_structure, remember_structure, structure_cache_key
    from day0.model.source import resolve_model
    from day0.model.structure import ModelStructure
    from day0.spec.pipeline import load_spec
    from day0.store import open_store

    path = _spec_in(tmp_path)
    spec = load_spec(path)
    store, resolved = open_store(spec.storage), resolve_model(spec.model)
    assert cached_structure(store, spec)[0] is not None  # _spec_in remembered it

    def no_parse(module: str) -> str:
        raise AssertionError("the digest was recomputed although no counting file changed")

    monkeypatch.setattr(day0.provenance, "code_digest", no_parse)
    assert cached_structure(store, spec)[0] is not None
    entry = store.get_json(structure_cache_key(resolved))
    touched = next(iter(entry["code"]["files"]))
    entry["code"]["files"][touched][0] -= 1  # as if the file were edited since
    store.put_json(structure_cache_key(resolved), entry)
    monkeypatch.undo()  # the digest is recomputed now: the same code gives the same digest ...
    assert cached_structure(store, spec)[0] is not None
    monkeypatch.setattr(day0.provenance, "code_digest", lambda m: "changed" if m == "day0.model.structure" else "x")
    assert cached_structure(store, spec)[0] is None  # ... a fixed analysis does not: recount
    structure = ModelStructure.model_validate_json((DATA / "deepseek-v3.structure.json").read_text())
    remember_structure(store, resolved, structure)
    assert cached_structure(store, spec)[0] == structure


def test_every_step_time_carries_its_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 39, item 5: `--json` gives each ranked plan and the chosen one a step-time band around its step
    time, with the profile and what it rests on; the text shows the band beside each plan's step time, in
    step 3's headline and in step 4's final step time."""
    spec = str(DATA / "deepseek-v3-2048-h800.yaml")
    assert run([spec, "--json", "--out", str(tmp_path / "p.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    band = doc["band"]
    assert band["profile"] == "datasheet" and band["software"] is None and band["runs"] >= 50
    assert "published runs (any software)" in band["basis"]
    for p in doc["plans"]:
        low, high = p["step_band_s"]
        assert low < p["time"]["step_s"] < high
    chosen = doc["chosen"]["estimate"]
    assert chosen["step_band_s"][0] < chosen["step_s"] < chosen["step_band_s"][1]
    assert run([spec, "--top", "3", "--out", str(tmp_path / "q.yaml"), "--force"]) == 0
    text = capsys.readouterr().out
    low, high = doc["plans"][0]["step_band_s"]
    assert f"({low:.3g}-{high:.3g})" in text
    assert f"- step time: {doc['plans'][0]['time']['step_s']:.3g} s ({low:.3g}-{high:.3g} s)" in text
    assert f"{chosen['step_band_s'][0]:.3f}-{chosen['step_band_s'][1]:.3f} s" in text
