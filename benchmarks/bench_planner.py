"""Step 3 planner: speed, accuracy and start-up.

- speed: the full search for a 1T-parameter MoE (Kimi K2, 1.03T) on 2,048 and 16,384 accelerators with
  every knob (TP, PP + virtual stages, EP + expert-TP, CP, DP, micro-batch, ZeRO 0-3, recompute, offload):
  process CPU time (`time.process_time()`), the best of 3 cold searches (the stage-partition caches
  cleared before each), target <= 0.5 s; on 4,096 against a brute-force enumeration of the same cost
  model (which must find the identical ranked plans);
- accuracy: the step-time error on every published run of tests/data/planner/published_runs.yaml (misses apart);
- start-up: the wall time of a `day0 plan` process on a cached structure, as a ratio to
  `python -c 'import pydantic, yaml'` measured in the same run in alternating pairs (target <= 3 in every
  pair), both with a warm bytecode cache as an installed package has; the tiny pipeline is the start-up
  case, DeepSeek-V3 on 2048 H800 is dominated by its search and is reported beside it.

    python -m benchmarks.run planner
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

CASES = [  # (name, model, platform, accelerators, seq_len, global_batch, CPU target s)
    ("kimi-k2-2048", "kimi-k2", "h800", 2048, 4096, 4096, 0.5),  # issue 25: 1.7 s, 27k configurations
    ("kimi-k2-16384", "kimi-k2", "h800", 16384, 4096, 16384, 0.5),  # Kimi K2's batch: 67M tokens
    ("kimi-k2", "kimi-k2", "h800", 4096, 4096, 4096, 2.0),  # with the brute-force comparison
    ("deepseek-v3", "deepseek-v3", "h800", 2048, 4096, 15360, 2.0),
    ("llama-3.1-405b", "llama-3.1-405b", "h100", 16384, 8192, 2048, 2.0),
]
BRUTE = "kimi-k2"
STARTUP_TARGET = 3.0
ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "planner"


def _structure(name: str):
    from day0.model.build import build_meta_model, load_hf_config
    from day0.model.source import resolve_model_source
    from day0.model.structure import analyze_structure

    return analyze_structure(build_meta_model(load_hf_config(resolve_model_source(name)), name), name)


def _solve(search, *inputs):
    """`search` over the planning problem of `inputs`, built inside the timed call as `day0 plan` builds it."""
    from day0.planner import PlanningProblem

    return search(PlanningProblem.of(*inputs))


def _timed(fn, repeats: int) -> tuple[object, float, float]:
    """(result, median wall s, least CPU s of this process over `repeats` cold runs): the CPU time is robust
    to a shared machine, and its least is the run the other load disturbed least."""
    from day0.planner import stages

    walls, cpus, out = [], [], None
    for _ in range(repeats):
        stages.partition.cache_clear()  # each run a cold search: nothing memoised from the one before
        stages.rank_groups.cache_clear()
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return out, statistics.median(walls), min(cpus)


def _table() -> tuple[list, dict, dict]:
    """The published table: its runs, each run's model structure and its hardware."""
    import yaml

    from day0.model.structure import ModelStructure
    from day0.planner.published import PublishedHardware, PublishedRun

    table = yaml.safe_load((DATA / "published_runs.yaml").read_text())
    hardware = {k: PublishedHardware(**v) for k, v in table["hardware"].items()}
    runs = [PublishedRun(**raw) for raw in table["runs"]]
    structures = {}
    for model in {r.model for r in runs}:
        path = DATA / "published" / f"{model}.structure.json"
        path = path if path.exists() else DATA / f"{model}.structure.json"
        structures[model] = ModelStructure.model_validate_json(path.read_text())
    return runs, structures, hardware


def _errors_at(sw, gemm: dict, dtype: str, rows: list, structures: dict, hardware: dict, e: float) -> list[float]:
    """The signed step-time errors of `rows` under `sw` with `dtype`'s GEMM efficiency at `e`."""
    from day0.planner.published import predict_run

    trial = sw.model_copy(update={"gemm_efficiency": gemm | {dtype: e}})
    return [predict_run(r, structures[r.model], hardware[r.hardware], trial).error for r in rows]


def fitted_profiles(runs: list, structures: dict, hardware: dict, held_out: str) -> dict:
    """The software profiles with their GEMM efficiency per compute dtype fitted
    (`published.fit_gemm_efficiency`) on the table's runs of that software computing in that dtype, leaving out
    the source `held_out` and the runs marked ambiguous; a dtype with no run left keeps the profile's cited
    figure. The committed profiles do not take these fits (`leave_one_source_out(fit=True)` says why)."""
    from day0.planner.published import fit_gemm_efficiency
    from day0.steps.parallel.config import SOFTWARE_PROFILES

    out = {}
    for name, sw in SOFTWARE_PROFILES.items():
        gemm = dict(sw.gemm_efficiency)
        for dtype in sw.gemm_efficiency:
            rows = [
                r
                for r in runs
                if r.software == name and r.compute == dtype and r.source != held_out and not r.ambiguous
            ]
            if not rows:
                continue

            gemm[dtype] = fit_gemm_efficiency(partial(_errors_at, sw, gemm, dtype, rows, structures, hardware))
        out[name] = sw.model_copy(update={"gemm_efficiency": gemm})
    return out


def published_errors() -> dict:
    """Predicted vs published step time of every run in the table (each with its software profile's committed
    figures), with the mean and worst error."""
    from day0.planner.published import predict_run

    runs, structures, hardware = _table()
    rows = {}
    for run in runs:
        p = predict_run(run, structures[run.model], hardware[run.hardware])
        rows[run.id] = {
            "published_step_s": round(p.published_step_s or 0, 3),
            "predicted_step_s": round(p.predicted_step_s or 0, 3),
            "error": round(p.error, 4) if p.error is not None else None,
            "mfu": round(p.mfu or 0, 4),
            "miss": run.miss,
            "ambiguous": run.ambiguous,
            "software": run.software,
            "source": run.source,
        }
    errors = [abs(r["error"]) for r in rows.values() if r["error"] is not None]
    within = [abs(r["error"]) for r in rows.values() if r["error"] is not None and not r["miss"]]
    return {
        "runs": rows,
        "mean_abs_error": round(sum(errors) / len(errors), 4),
        "median_abs_error": round(statistics.median(errors), 4),
        "max_abs_error": round(max(errors), 4),
        "within_bound": {"runs": len(within), "mean_abs_error": round(sum(within) / len(within), 4)},
        "target": "every run <= 20%, mean <= 8% (issue 25); runs marked miss: say why",
    }


def leave_one_source_out(fit: bool = False) -> dict:
    """Issue 39 item 6: accuracy as a user meets it, each source's runs predicted with nothing fitted on that
    source, each run with its software profile's figures. No constant of the cost model is fitted on the table
    (each is cited), so a held-out source's errors are its runs' errors as they stand; with `fit`, each profile's
    GEMM efficiencies are refitted on its other sources' runs (`fitted_profiles`) and the held-out runs
    predicted with those, the measurement behind not fitting them. The step-time band (`uncertainty`) is
    taken from the other sources' errors only. Runs marked `ambiguous` (their source printed conflicting
    figures for the same setup) are reported apart from the headline figures. The dropless routing load is
    derived from a table of the ModelZoo readme whose other table is a source here: that source's runs are
    predicted without it (`DROPLESS_LOAD_SOURCE`). Target: mean |error| <= 15%,
    worst <= 35%."""
    from day0.planner.published import predict_run
    from day0.planner.uncertainty import COVERAGE, central_errors

    runs, structures, hardware = _table()
    errors: dict[str, float] = {}
    refits: dict[str, dict] = {}
    for source in sorted({r.source for r in runs}):
        profiles = fitted_profiles(runs, structures, hardware, held_out=source) if fit else {}
        label = " ".join(source.split())[:80]
        refits[label] = {name: dict(sw.gemm_efficiency) for name, sw in profiles.items()}
        for r in runs:
            if r.source == source:
                if DROPLESS_LOAD_SOURCE in source:  # the load is derived from this source's readme: not used
                    r = r.model_copy(update={"options": {**r.options, "dropless_expert_load": 1.0}})
                p = predict_run(r, structures[r.model], hardware[r.hardware], profiles.get(r.software or ""))
                assert p.error is not None, r.id
                errors[r.id] = p.error
    headline = [r for r in runs if not r.ambiguous]
    sources: dict[str, dict] = {}
    inside = 0
    for source in sorted({r.source for r in headline}):
        held = [errors[r.id] for r in headline if r.source == source]
        low, high = central_errors([errors[r.id] for r in headline if r.source != source])
        hits = sum(low <= e <= high for e in held)
        inside += hits
        label = " ".join(source.split())[:80]
        sources[label] = {
            "runs": len(held),
            "mean_abs_error": round(sum(abs(e) for e in held) / len(held), 4),
            "worst_error": round(max(held, key=abs), 4),
            "inside_band_of_the_others": hits,
        } | ({"gemm_efficiency_refit": refits[label]} if fit else {})
    absolute = [abs(errors[r.id]) for r in headline]
    mean, worst = sum(absolute) / len(absolute), max(absolute)
    worst_run = max(headline, key=lambda r: abs(errors[r.id]))
    return {
        "runs": len(headline),
        "mean_abs_error": round(mean, 4),
        "median_abs_error": round(statistics.median(absolute), 4),
        "max_abs_error": round(worst, 4),
        "worst_run": worst_run.id,
        "band_coverage": round(inside / len(headline), 3),
        "band_coverage_target": COVERAGE,
        "per_run": {r.id: round(errors[r.id], 4) for r in runs},
        "ambiguous": {r.id: round(errors[r.id], 4) for r in runs if r.ambiguous},
        "with_ambiguous": {
            "runs": len(runs),
            "mean_abs_error": round(sum(abs(e) for e in errors.values()) / len(errors), 4),
            "max_abs_error": round(max(abs(e) for e in errors.values()), 4),
        },
        "sources": sources,
        "target": "mean |error| <= 15%, worst <= 35% (issue 39 item 6), runs marked ambiguous reported apart",
        "met": mean <= 0.15 and worst <= 0.35,
    }


MODELZOO_LONG_CONTEXT = {  # seq_len: (CP, TFLOP/s per GPU forced balance, dropless)
    16384: (1, 295, 237),
    32768: (2, 335, 277),
    65536: (4, 368, 320),
    131072: (8, 389, 357),
}
"""yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md at c1ad0b5c89f425d60febddc38e7f741a16f08bd1, "Long
Context": Qwen3-235B-A22B on 32 nodes of 8 H100, TP4 EP8 PP8 VPP4, GBS 256, DeepEP, bf16, recompute layernorm and
moe; not rows of the published table (only their ratio is used, by `dropless_expert_load`)."""
DROPLESS_LOAD_SOURCE = "Megatron-MoE-ModelZoo"
"""The table's source that `MODELZOO_LONG_CONTEXT` comes from too: held out, its runs are predicted without the
dropless load derived from it (`leave_one_source_out`)."""


def dropless_expert_load() -> dict:
    """`day0.planner.inputs.DROPLESS_EXPERT_LOAD`'s derivation: for each length of `MODELZOO_LONG_CONTEXT`, the
    busiest-rank load (bisection over [1, 4]) at which the cost model's dropless step is the published
    forced/dropless TFLOP/s ratio times its balanced step, the same plan otherwise; the median of the four.
    Full recompute stands for the source's `layernorm moe` modules (the planner's selective modules have no
    whole-MoE-layer recompute, and without it the layout does not fit), which the ratio largely cancels."""
    from day0.planner.published import PublishedRun, predict_run

    _, structures, hardware = _table()
    s, hw = structures["qwen3-235b-a22b"], hardware["h100-sxm"]

    def step(seq: int, cp: int, routing: str, load: float) -> float:
        run = PublishedRun(
            id=f"modelzoo-long-context-{seq}",
            source="modelzoo long context",
            software="megatron-core-2025",
            model="qwen3-235b-a22b",
            hardware="h100-sxm",
            accelerators=256,
            seq_len=seq,
            global_batch=256,
            degrees={"tp": 4, "pp": 8, "cp": cp, "ep": 8, "dp": 256 // (32 * cp)},
            recompute="full",
            zero_stage=1,
            options={"micro_batches": [1], "moe_routing": routing, "dropless_expert_load": load},
            knobs={"micro_batch": 1, "vp": 4},
            published={"step_s": 1.0},
        )
        p = predict_run(run, s, hw)
        assert p.predicted_step_s is not None, p.message
        return p.predicted_step_s

    loads = {}
    for seq, (cp, forced, dropless) in MODELZOO_LONG_CONTEXT.items():
        target = step(seq, cp, "balanced", 1.0) * forced / dropless
        low, high = 1.0, 4.0
        while high - low > 1e-3:
            mid = (low + high) / 2
            low, high = (mid, high) if step(seq, cp, "dropless", mid) < target else (low, mid)
        loads[seq] = round((low + high) / 2, 3)
    return {"per_seq_len": loads, "median": round(statistics.median(loads.values()), 2)}


def _bytecode_env(cache: Path) -> dict[str, str]:
    """The environment for timing a process start: Python may cache bytecode, as in an installed package
    (pip compiles on install), in a private PYTHONPYCACHEPREFIX so the tree is untouched. Without this a
    PYTHONDONTWRITEBYTECODE environment recompiles every day0 module in every process, while the
    baseline's pydantic and yaml come precompiled from site-packages."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": str(cache)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pair(base: list[str], cmd: list[str], env: dict[str, str], rounds: int = 5) -> dict:
    """`cmd` against `base` in `rounds` alternating pairs after one untimed run of each (which fills the
    bytecode and file caches): each round's ratio by wall time and by the child's own CPU time
    (getrusage, what the process costs on a shared machine), so drifting load lands on both sides."""
    for c in (base, cmd):
        subprocess.run(c, cwd=ROOT, check=True, capture_output=True, env=env)
    walls: dict[str, list[float]] = {"base": [], "cmd": []}
    cpus: dict[str, list[float]] = {"base": [], "cmd": []}
    for _ in range(rounds):
        for key, c in (("base", base), ("cmd", cmd)):
            t, u = time.perf_counter(), _children_cpu()
            subprocess.run(c, cwd=ROOT, check=True, capture_output=True, env=env)
            walls[key].append(time.perf_counter() - t)
            cpus[key].append(_children_cpu() - u)
    ratios = [p / b for b, p in zip(walls["base"], walls["cmd"])]
    cpu_ratios = [p / b for b, p in zip(cpus["base"], cpus["cmd"])]
    return {
        "base_s": round(statistics.median(walls["base"]), 3),
        "base_cpu_s": round(statistics.median(cpus["base"]), 3),
        "plan_s": round(statistics.median(walls["cmd"]), 3),
        "plan_cpu_s": round(statistics.median(cpus["cmd"]), 3),
        "ratio": round(statistics.median(ratios), 2),
        "ratio_max": round(max(ratios), 2),
        "cpu_ratio": round(statistics.median(cpu_ratios), 2),
        "cpu_ratio_max": round(max(cpu_ratios), 2),
    }


def startup_ratio() -> dict:
    """`day0 plan --json` on a cached structure against importing pydantic and yaml, in the same run and
    environment, in alternating pairs: the default tiny pipeline (start-up dominated: its search takes
    milliseconds; the target applies to it, to the median and to the worst pair) and DeepSeek-V3 on 2048
    H800 (dominated by the search itself, reported beside it)."""
    import yaml

    from cli.plan import build_structure, remember_structure
    from day0.model.source import resolve_model
    from day0.paths import CONFIGS_DIR
    from day0.spec.pipeline import load_yaml, spec_from_dict
    from day0.store import open_store

    out: dict = {}
    base = [sys.executable, "-c", "import pydantic, yaml"]
    with tempfile.TemporaryDirectory() as tmp:
        env = _bytecode_env(Path(tmp) / "pycache")
        for name, path, dominated_by in (
            ("tiny-local", CONFIGS_DIR / "pipelines" / "tiny-local.yaml", "start-up"),
            ("deepseek-v3-2048-h800", DATA / "deepseek-v3-2048-h800.yaml", "search"),
        ):
            raw = load_yaml(path) | {"storage": f"file://{tmp}/store"}
            spec_path = Path(tmp) / f"{name}.yaml"
            spec_path.write_text(yaml.safe_dump(raw))
            spec = spec_from_dict(raw)
            resolved = resolve_model(spec.model)
            remember_structure(open_store(spec.storage), resolved, build_structure(resolved))
            cmd = [sys.executable, "-m", "cli", "plan", str(spec_path), "--json", "--out", f"{tmp}/p.yaml", "--force"]
            out[name] = _pair(base, cmd, env, rounds=5 if dominated_by == "start-up" else 3)
            out[name]["dominated_by"] = dominated_by
    tiny = out["tiny-local"]
    tiny["under_target"] = tiny["ratio_max"] <= STARTUP_TARGET
    tiny["under_target_cpu"] = tiny["cpu_ratio_max"] <= STARTUP_TARGET
    out["target"] = f"tiny-local <= {STARTUP_TARGET} x `python -c 'import pydantic, yaml'` in every pair"
    out["note"] = (
        "median and worst of alternating pairs after one untimed run of each, both commands with a bytecode "
        "cache (PYTHONPYCACHEPREFIX)"
    )
    return out


def run(brute: bool = True) -> dict:
    from day0.paths import CONFIGS_DIR
    from day0.planner import brute_force, cluster_figures, plan_parallelism
    from day0.spec.cluster import PlatformSpec
    from day0.spec.pipeline import TrainingSpec, load_yaml

    results, published = {}, published_errors()
    for name, model, platform, n, seq, gb, target in CASES:
        s = _structure(model)
        hw = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{platform}.yaml")).hardware
        cluster, training = cluster_figures(hw, n, 8), TrainingSpec(seq_len=seq, global_batch=gb)
        report, wall, cpu = _timed(partial(_solve, plan_parallelism, s, cluster, training), 3)
        best = report.best
        row = {
            "accelerators": n,
            "params_total_b": round(s.params_total / 1e9, 1),
            "search_wall_s": round(wall, 3),
            "search_cpu_s": round(cpu, 3),
            "target_cpu_s": target,
            "under_target_cpu": cpu <= target,
            "under_target_wall": wall <= target,
            "degree_tuples": report.tuples_considered,
            "configurations_evaluated": report.configurations_evaluated,
            "configurations_per_s": round(report.configurations_evaluated / cpu),
            "tuples_per_s": round(report.tuples_considered / cpu),
            "best": {
                **best.model_dump()["parallel"],
                **best.model_dump()["memory_knobs"],
                "memory_gib": round(best.memory.total_bytes / 2**30, 1),
                "step_s": round(best.time.step_s, 3),
                "mfu": round(best.time.mfu, 4),
            },
        }
        if brute and name == BRUTE:
            ref, bwall, bcpu = _timed(partial(_solve, brute_force, s, cluster, training), 1)
            row["brute_force"] = {
                "wall_s": round(bwall, 2),
                "cpu_s": round(bcpu, 2),
                "configurations_evaluated": ref.configurations_evaluated,
                "configurations_per_s": round(ref.configurations_evaluated / bcpu),
                "identical_best_plan": ref.best.model_dump() == best.model_dump(),
                "identical_ranking": [p.model_dump() for p in ref.plans] == [p.model_dump() for p in report.plans],
                "speedup": round(bcpu / cpu, 1),
            }
        results[name] = row
    return {
        "cases": results,
        "published": published,
        "dropless_expert_load": dropless_expert_load(),
        "leave_one_source_out": leave_one_source_out(),
        "leave_one_source_out_fitted": {
            k: v for k, v in leave_one_source_out(fit=True).items() if k not in ("per_run", "target")
        },
        "startup": startup_ratio(),
        "target": "full search for Kimi K2 (1.03T MoE) on 2048 and on 16384 accelerators <= 0.5 s of CPU",
        "note": "wall time depends on other load on the shared 2-core machine; process CPU time is the "
        "planner's own work (the least of 3 cold runs)",
    }


def write_validation() -> None:
    """Rewrite `uncertainty.VALIDATION_ERRORS` from the table's errors as the planner gives them now: every
    run's under "all", each software profile's runs under its name (after a change to the cost model or the
    table; test_published_runs holds the committed figures to them)."""
    import re

    runs = [r for r in published_errors()["runs"].values() if r["error"] is not None]
    groups = {"all": runs} | {
        name: [r for r in runs if r["software"] == name] for name in sorted({r["software"] for r in runs} - {None})
    }
    body = "".join(
        f'    "{name}": (\n' + "".join(f"        {e:+.3f},\n" for e in sorted(r["error"] for r in rs)) + "    ),\n"
        for name, rs in groups.items()
    )
    path = ROOT / "day0" / "planner" / "uncertainty.py"
    head = "VALIDATION_ERRORS: dict[str, tuple[float, ...]] = {\n"
    text = re.sub(re.escape(head) + r".*?\n}\n", lambda _: head + body + "}\n", path.read_text(), flags=re.S)
    path.write_text(text)


if __name__ == "__main__":
    import json

    if sys.argv[1:] == ["--validation"]:
        write_validation()
    else:
        print(json.dumps(run(), indent=2))
