"""What a practitioner reads (issue 25 item 2): every time term on the critical path or marked hidden, with
the critical path summing to the step; step 4 as a cumulative sequence whose changes add up; the chosen
plan as Megatron-LM arguments and a torchtitan config that say the same degrees and layer split; the
elastic pool's minimum and maximum; no link to a plot that is not written."""

from __future__ import annotations

import itertools
import json
import re
import tomllib
from functools import cache
from pathlib import Path

import pytest

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import PlanningProblem, cluster_figures, plan_parallelism
from day0.planner.frameworks import GRAD_DTYPE_DEFAULTS, FrameworkSetup, framework_configs, to_toml
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import TrainingSpec, load_spec, load_yaml
from day0.steps.optimize.plan import optimize_for_spec
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel.config import OverlapPin, ParallelConstraints
from day0.steps.parallel.plan import plan_for_spec
from day0.steps.parallel.result import PlanReport
from day0.steps.parallel.text import time_terms
from tests.fixtures import paths

DATA = paths.DATA / "planner"
ELASTIC = DATA / "qwen3-30b-a3b-64-h100-elastic.yaml"


@cache
def structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


@cache
def planned(path: Path, model: str) -> tuple[PlanReport, OptimizationReport]:
    spec = load_spec(path)
    report = plan_for_spec(spec, structure(model))
    return report, optimize_for_spec(spec, structure(model), report)


def _hw(name: str):
    return PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{name}.yaml")).hardware


CASES = [  # model, platform, accelerators, per node, seq, global batch: CP, PP, EP, a synchronous CPU
    ("llama-3.1-405b", "h100", 2048, 8, 32768, 256),
    ("qwen3-30b-a3b", "h100", 64, 8, 4096, 512),
    ("deepseek-v3", "h800", 512, 8, 4096, 1024),
    ("tiny-deepseek-v3", "cpu", 2, 2, 128, 8),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_critical_path_sums_to_the_step_and_the_rest_is_marked_hidden(case: tuple) -> None:
    model, platform, n, per_node, seq, gb = case
    report = plan_parallelism(
        PlanningProblem.of(
            structure(model), cluster_figures(_hw(platform), n, per_node), TrainingSpec(seq_len=seq, global_batch=gb)
        )
    )
    assert report.plans
    for p in report.plans[:10]:
        terms = time_terms(p, report.options)
        assert sum(t.critical_s for t in terms) == pytest.approx(p.time.step_s, rel=1e-9)
        for t in terms:
            assert 0 <= t.critical_s <= t.total_s * (1 + 1e-9) + 1e-12, t
            if t.critical_s < t.total_s * (1 - 1e-9):
                assert "hidden behind" in t.note, t


def test_plans_that_differ_in_cp_differ_in_step_time_when_the_ring_shows() -> None:
    """Llama-3-8B with TP 8: CP 2 (micro-batch 2) holds the tokens per rank of CP 1 (micro-batch 1), so the
    two differ by the CP ring alone. Across nodes at 2k tokens the ring shows and the steps differ; at a
    long sequence it hides behind attention, the steps are equal and the term says so."""
    from day0.planner.evaluate import PlanContext
    from day0.planner.inputs import PlannerOptions
    from day0.planner.results import make_plan
    from day0.planner.values import Degrees, MemoryKnobs

    o, k, cluster = PlannerOptions(), MemoryKnobs("full", 1, "none"), cluster_figures(_hw("h100"), 64, 8)
    for seq, shows in ((2048, True), (65536, False)):
        problem = PlanningProblem.of(
            structure("llama-3-8b"), cluster, TrainingSpec(seq_len=seq, global_batch=64), options=o
        )
        one, two = (PlanContext(problem, Degrees(8, 1, 1, 1, 1, cp, 8 // cp, cp, 64 // 8)) for cp in (1, 2))
        t1, t2 = one.time(k), two.time(k)
        assert t2.cp_comm_s > 0 and t1.cp_comm_s == 0
        assert (t2.cp_comm_exposed_s > 0) == shows and (t2.step_s > t1.step_s) == shows
        if not shows:
            assert t2.step_s == pytest.approx(t1.step_s, rel=1e-12)
            cp_row = next(t for t in time_terms(make_plan(two, k, two.memory(k), t2), o) if t.name == "cp comm")
            assert cp_row.note == "hidden behind the attention of the remote K/V blocks"


def test_step4_is_a_cumulative_sequence_whose_changes_add_up() -> None:
    """Step 3 ranks plans with the overlaps on (issue 39), so the DP overlap is pinned off here: the exposed
    gradient reduction leaves bf16 reduction, a lossy technique, to step 4."""
    spec = load_spec(ELASTIC)
    spec = spec.model_copy(update={"parallel": ParallelConstraints(overlap=OverlapPin(dp=False))})
    report = plan_for_spec(spec, structure("qwen3-30b-a3b"))
    opt = optimize_for_spec(spec, structure("qwen3-30b-a3b"), report)
    seq = opt.sequence
    assert seq[0].after == "step 3's plan" and seq[0].step_s == pytest.approx(report.best.time.step_s)
    assert len(seq) >= 2
    assert sum(s.delta_s for s in seq) == pytest.approx(opt.step_after_s - opt.step_before_s, rel=1e-9, abs=1e-12)
    assert seq[-1].step_s == pytest.approx(opt.plan.time.step_s, rel=1e-12)
    for before, after in itertools.pairwise(seq):
        assert after.delta_s == pytest.approx(after.step_s - before.step_s) and after.delta_s < 0
    md = opt.to_markdown()
    assert "| after | step s | change s | GiB |" in md and "(the changes add up)" in md


def _megatron(args: list[str]) -> dict[str, str]:
    out = {}
    for a in args:
        flag, _, value = a.partition(" ")
        out[flag] = value.strip('"')
    return out


def _layout_stages(layout: str) -> list[str]:
    """Megatron's own parse of a layout string (PipelineParallelLayerLayout.parse_str_to_list)."""
    s = layout.replace(",", "")
    s = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


@pytest.mark.parametrize(
    ("path", "model"),
    [(ELASTIC, "qwen3-30b-a3b"), (DATA / "deepseek-v3-2048-h800.yaml", "deepseek-v3")],
    ids=["qwen3-elastic", "deepseek-v3-2048"],
)
def test_the_frameworks_say_the_chosen_plan(path: Path, model: str) -> None:
    report, opt = planned(path, model)
    plan, fw = opt.plan, opt.frameworks
    assert plan is not None and fw is not None
    d, k = plan.parallel, plan.memory_knobs
    m = _megatron(fw.megatron)
    assert m["--tensor-model-parallel-size"] == str(d.tensor_parallel)
    assert m["--pipeline-model-parallel-size"] == str(d.pipeline_parallel)
    assert m["--context-parallel-size"] == str(d.context_parallel)
    assert m["--expert-model-parallel-size"] == str(d.expert_parallel)
    assert m["--moe-token-dispatcher-type"] == report.options.moe_token_dispatcher  # Megatron's default: allgather
    assert ("--moe-grouped-gemm" in m) == report.options.moe_grouped_gemm
    assert m["--micro-batch-size"] == str(d.micro_batch)
    assert ("--use-distributed-optimizer" in m) == (k.zero_stage == 1)
    assert ("--overlap-grad-reduce" in m) == (opt.comm.dp_overlap and d.dense_replicas > 1)
    bf16_grads = opt.comm.grad_reduce_dtype == "bf16" or report.options.grad_dtype == "bf16"
    assert ("--grad-reduce-in-bf16" in m) == bf16_grads
    if k.recompute != "none":
        assert m["--recompute-granularity"] == k.recompute
    layout = m.get("--pipeline-model-parallel-layout")
    if layout:
        stages = _layout_stages(layout)
        assert len(stages) == d.pipeline_parallel * d.virtual_pipeline_stages
        assert [sum(c in "tm" for c in st) for st in stages] == plan.chunk_layers
        assert stages[0].startswith("E") and stages[-1].endswith("L")
    toml = tomllib.loads(to_toml(fw.torchtitan))
    par = toml["parallelism"]
    product = (
        par["data_parallel_replicate_degree"]
        * par["data_parallel_shard_degree"]
        * par["tensor_parallel_degree"]
        * par["pipeline_parallel_degree"]
        * par["context_parallel_degree"]
    )
    assert product == d.accelerators
    assert toml["training"]["local_batch_size"] * d.data_parallel == toml["training"]["global_batch_size"]
    assert toml["activation_checkpoint"]["mode"] == k.recompute
    if d.pipeline_parallel > 1:
        parts = par["module_fqns_per_model_part"]
        layers = [x for part in parts for x in part if x.startswith("layers.")]
        assert layers == [f"layers.{i}" for i in range(structure(model).num_layers)]


def test_the_elastic_pool_is_planned_at_its_minimum_and_maximum() -> None:
    report, _ = planned(ELASTIC, "qwen3-30b-a3b")
    low, high = report.elastic
    assert (low.accelerators, high.accelerators) == (32, 64) and "cloud-elastic 0" in low.label
    assert high.step_s == report.best.time.step_s
    # the report's options are those of the schedule that won at the maximum (DualPipe may have); the minimum
    # is planned from the spec's, which search both schedules
    assert "dualpipe" not in report.options.pinned
    alone = plan_parallelism(
        PlanningProblem.of(
            structure("qwen3-30b-a3b"),
            report.cluster.with_accelerators(32),
            report.training,
            None,
            report.options.model_copy(update={"dualpipe": False}),
        ),
        False,
    )
    assert low.feasible and low.step_s == pytest.approx(alone.best.time.step_s, rel=1e-12)
    assert "## Elastic cluster" in report.to_markdown()


def test_day0_plan_prints_frameworks_and_next_steps_and_links_no_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from cli.main import main
    from cli.plan import remember_structure
    from day0.model.source import resolve_model
    from day0.spec.pipeline import spec_from_dict
    from day0.store import open_store

    raw = load_yaml(ELASTIC) | {"storage": f"file://{tmp_path / 'store'}"}
    path, out = tmp_path / "spec.yaml", tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = spec_from_dict(raw)
    remember_structure(open_store(spec.storage), resolve_model(spec.model), structure("qwen3-30b-a3b"))
    assert main(["plan", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "## Run it" in text and "--tensor-model-parallel-size" in text and "[parallelism]" in text
    assert "## What to do next" in text and "## Elastic cluster" in text
    assert ".png" not in text  # day0 plan writes no plot, so it links none
    assert main(["plan", str(path), "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["frameworks"]["megatron"] and doc["frameworks"]["torchtitan"]["parallelism"]
    assert doc["advice"] and len(doc["elastic"]) == 2 and doc["step4"]["sequence"]
    assert doc["chosen"]["frameworks"]["megatron"] == doc["frameworks"]["megatron"]


def test_each_framework_states_its_gradient_default_and_a_bf16_plan_turns_its_switch() -> None:
    """GRAD_DTYPE_DEFAULTS gives each framework's default with its source; a bf16-gradient plan sets
    Megatron's --grad-reduce-in-bf16 and torchtitan's mixed_precision_reduce, each with a note naming the
    default it departs from; an fp32 plan needs neither."""
    assert set(GRAD_DTYPE_DEFAULTS) == {"Megatron-LM", "torchtitan"}
    assert all(dtype in ("fp32", "bf16") and source for dtype, source in GRAD_DTYPE_DEFAULTS.values())
    report, opt = planned(ELASTIC, "qwen3-30b-a3b")
    assert opt.plan is not None
    for grad in ("fp32", "bf16"):
        options = report.options.model_copy(update={"grad_dtype": grad})
        comm = opt.comm.model_copy(update={"grad_reduce_dtype": None})
        setup = FrameworkSetup(
            training=report.training, options=options, comm=comm, num_layers=48, moe=True, per_node=8
        )
        fw = framework_configs(opt.plan, setup)
        reduce = fw.torchtitan["training"]["mixed_precision_reduce"]
        notes = [n for n in fw.notes if "gradients by default" in n]
        assert reduce == ("bfloat16" if grad == "bf16" else "float32")
        assert ("--grad-reduce-in-bf16" in fw.megatron) == (grad == "bf16")
        assert len(notes) == (2 if grad == "bf16" else 0), fw.notes


def test_the_elastic_ends_carry_their_band() -> None:
    """Each end of an elastic pool is a predicted step time too: it carries the search's band."""
    report, _ = planned(ELASTIC, "qwen3-30b-a3b")
    assert report.band is not None and len(report.elastic) == 2
    for e in report.elastic:
        assert e.step_s is not None and e.step_band_s == report.band.around(e.step_s)
