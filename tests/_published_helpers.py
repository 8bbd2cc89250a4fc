"""The published-runs table (tests/data/planner/published_runs.yaml) as `day0 plan` specs: one spec per run
pinning every degree and knob, one pinning the degrees only, and `day0 plan SPEC --json` run on each
through the CLI's own entry point (`cli.main.main`, in this process: the same code path as the command,
without a Python start-up per run).

Knobs a source does not state are searched once through the Python API (`predict_run`, within the
published degrees and the knobs the source does state); the fully pinned spec then pins what it chose.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner.published import PublishedHardware, PublishedRun, RunPrediction, predict_run, run_options
from day0.planner.results import Plan

DATA = Path(__file__).parent / "data" / "planner"
TABLE = yaml.safe_load((DATA / "published_runs.yaml").read_text())
HARDWARE = {k: PublishedHardware(**v) for k, v in TABLE["hardware"].items()}
RUNS = [PublishedRun(**r) for r in TABLE["runs"]]
MEMORY_ONLY = [PublishedRun(**r) for r in TABLE["memory_only"]]
MISSES = {r["id"]: r["miss"] for r in TABLE["runs"] if r.get("miss")}
"""Runs the cost model misses by more than 20%, each with the cause found (`miss:` in the table)."""


@cache
def structure(name: str) -> ModelStructure:
    path = DATA / "published" / f"{name}.structure.json"
    path = path if path.exists() else DATA / f"{name}.structure.json"
    return ModelStructure.model_validate_json(path.read_text())


def model_source(name: str) -> str:
    """What a spec's `model.source` names: a shipped config (configs/models/), else the table's own
    config directory (the GPT models, tests/data/planner/published/<name>/config.json)."""
    return name if (CONFIGS_DIR / "models" / name).is_dir() else str(DATA / "published" / name)


@cache
def predict(run_id: str) -> RunPrediction:
    run = next(r for r in RUNS + MEMORY_ONLY if r.id == run_id)
    return predict_run(run, structure(run.model), HARDWARE[run.hardware])


def _planner(run: PublishedRun, hw: PublishedHardware, plan: Plan | None) -> dict[str, Any]:
    """The run's assumptions (what `planner:` states; not knobs), and search ranges wide enough to hold
    the pinned plan."""
    o = run_options(run, hw)
    vpp = plan.parallel.virtual_pipeline_stages if plan else 1
    return {
        "profile": "datasheet",
        "hbm_bandwidth_gbps": o.hbm_bandwidth_gbps,
        "flash_attention": o.flash_attention,
        "attention_efficiency": o.attention_efficiency,
        "dropout": o.dropout,
        "selective_recompute": list(o.selective_modules),
        "optimizer_state_dtype": o.optimizer_state_dtype,
        "grad_dtype": o.grad_dtype,
        "mtp_layers": o.mtp_layers,
        "expert_max_nodes": o.expert_max_nodes,
        "sequence_parallel": o.sequence_parallel,
        "dualpipe": o.dualpipe,
        "fp8_activation_cache": o.fp8_activation_cache,
        "max_virtual_stages": max(o.max_virtual_stages, vpp),
        "max_context_parallel": max(o.max_context_parallel, run.degrees.get("cp", 1)),
    }


def _spec(run: PublishedRun, hw: PublishedHardware, parallel: dict[str, Any], planner: dict[str, Any], store: Path):
    return {
        "metadata": {"name": run.id.replace(".", "-")[:63].strip("-")},
        "model": {"source": model_source(run.model)},
        "storage": f"file://{store}",
        "platform": {"name": run.hardware, "device_type": "cuda", "hardware": hw.spec().model_dump()},
        "cluster": {
            "node_pools": [
                {
                    "name": "pool",
                    "accelerator": {"per_node": run.per_node, "memory_gib": hw.memory_gib},
                    "nodes": run.accelerators // run.per_node,
                    "memory_gib_per_node": run.host_memory_gib_per_node,
                }
            ]
        },
        "training": {"seq_len": run.seq_len, "global_batch": run.global_batch, "precision": {"compute": run.compute}},
        "planner": planner,
        "parallel": parallel,
    }


def pinned_spec(run: PublishedRun, hw: PublishedHardware, p: Plan, store: Path) -> dict[str, Any]:
    """A spec pinning everything the run states or the Python API chose for it: every degree and knob
    of its plan in `parallel:`."""
    o, d, k = run_options(run, hw), p.parallel, p.memory_knobs
    recompute: Any = k.recompute
    if k.recompute == "full":
        recompute = {"granularity": "full", "method": o.recompute_method, "num_layers": o.recompute_num_layers}
    elif k.recompute == "selective" and "selective_modules" in run.options:  # else planner.selective_recompute's
        recompute = {"granularity": "selective", "modules": list(o.selective_modules)}
    parallel: dict[str, Any] = {
        "tensor_parallel": d.tensor_parallel,
        "pipeline_parallel": d.pipeline_parallel,
        "virtual_pipeline_stages": d.virtual_pipeline_stages,
        "expert_parallel": d.expert_parallel,
        "expert_tensor_parallel": d.expert_tensor_parallel,
        "context_parallel": d.context_parallel,
        "data_parallel": d.data_parallel,
        "micro_batch": d.micro_batch,
        "recompute": recompute,
        "zero_stage": k.zero_stage,
        "offload": k.offload,
        "sequence_parallel": o.sequence_parallel,
        "dualpipe": o.dualpipe,
        "overlap": {"tp": o.comm.tp_overlap, "ep": o.comm.ep_overlap, "dp": o.comm.dp_overlap},
        "grad_reduce_dtype": o.comm.grad_reduce_dtype or o.grad_dtype,
    }
    if run.compute == "fp8":
        parallel["fp8"] = {"activation_cache": o.fp8_activation_cache, "dispatch": o.comm.dispatch_dtype == "fp8"}
    return _spec(run, hw, parallel, _planner(run, hw, p), store)


def degrees_spec(run: PublishedRun, hw: PublishedHardware, p: Plan, store: Path) -> dict[str, Any]:
    """The same run with only its degrees pinned: the planner chooses every knob."""
    d = p.parallel
    parallel = {
        "tensor_parallel": d.tensor_parallel,
        "pipeline_parallel": d.pipeline_parallel,
        "expert_parallel": d.expert_parallel,
        "context_parallel": d.context_parallel,
        "data_parallel": d.data_parallel,
    }
    return _spec(run, hw, parallel, _planner(run, hw, p), store)


def remember_structures(store: Path) -> None:
    """Every table model's structure in the store's structure cache, as `day0 plan` fills it: the CLI
    then reads it (as it would after a first plan) instead of building the model on the meta device."""
    from cli.plan import remember_structure
    from day0.model.source import resolve_model
    from day0.spec.pipeline import ModelSpec
    from day0.store import open_store

    s = open_store(f"file://{store}")
    for name in sorted({r.model for r in RUNS}):
        remember_structure(s, resolve_model(ModelSpec(source=model_source(name))), structure(name))


def plan_cli(raw: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`day0 plan SPEC --json --out PLAN` on `raw` written as SPEC in `folder`: the JSON it prints."""
    from cli.main import main

    spec, out = folder / f"{raw['metadata']['name']}.yaml", folder / f"{raw['metadata']['name']}.plan.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(["plan", str(spec), "--json", "--out", str(out), "--force"])
    assert code == 0, f"day0 plan {spec} exited {code}"
    return json.loads(buf.getvalue())
