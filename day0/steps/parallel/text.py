"""Step 3's report as text: the ranked table, the best plan's memory and time terms, the elastic cluster's
two ends, what to do next, the rejected setups and the assumptions.

Contract: pure functions of the search (`PlanSearch`) and, for the section, its verdict.
`time_terms(plan, options)` lists every time term with its total, what of it is on the critical path,
and what hides the rest; the critical-path column sums to the plan's step time. A link to
`memory.png` is written only with `images=True` and a plan to draw (the caller that writes the step's
files).
"""

from __future__ import annotations

from typing import NamedTuple

from day0.core.result import Judgement
from day0.planner.inputs import GIB, PlannerOptions
from day0.planner.results import Plan, PlanSearch

__all__ = ["TimeTerm", "plan_table", "report_markdown", "time_terms"]


class TimeTerm(NamedTuple):
    name: str
    total_s: float  # the term's own seconds per step, before any overlap
    critical_s: float  # of which on the critical path (these sum to the step time)
    note: str  # what hides the rest, or why all of it shows


def _hidden(total: float, critical: float, behind: str, shown: str) -> str:
    if total <= 0:
        return ""
    if critical <= 1e-12:
        return f"hidden behind {behind}"
    if critical < total * (1 - 1e-9):
        return f"{total - critical:.3g} s hidden behind {behind}"
    return shown


def _switched(total: float, critical: float, overlapped: bool, behind: str) -> str:
    """The note of a term an overlap switch may hide: what of it `behind` hides when switched on."""
    if overlapped:
        return _hidden(total, critical, behind, "not overlapped")
    return "not overlapped" if total else ""


def time_terms(plan: Plan, options: PlannerOptions) -> list[TimeTerm]:
    """Every time term of the plan's step (see the module contract)."""
    t, d, k, comm = plan.time, plan.parallel, plan.memory_knobs, options.comm
    sm = f"; the SMs it takes, {options.overlap_sm_fraction:.0%} of it, counted"
    zero_sync = "the last backward" if k.zero_stage <= 1 else "each micro-batch's backward"
    return [
        TimeTerm("compute", t.compute_s, t.compute_s, "GEMMs, attention, memory-bound kernels: forward + backward"),
        TimeTerm("recompute", t.recompute_s, t.recompute_s, f"{k.recompute} recompute" if t.recompute_s else ""),
        TimeTerm(
            "tp comm",
            t.tp_comm_s,
            t.tp_comm_exposed_s,
            _switched(t.tp_comm_s, t.tp_comm_exposed_s, comm.tp_overlap, "the GEMMs" + sm),
        ),
        TimeTerm(
            "ep comm",
            t.ep_comm_s,
            t.ep_comm_exposed_s,
            _switched(t.ep_comm_s, t.ep_comm_exposed_s, comm.ep_overlap, "another micro-batch's compute" + sm),
        ),
        TimeTerm(
            "cp comm",
            t.cp_comm_s,
            t.cp_comm_exposed_s,
            _hidden(t.cp_comm_s, t.cp_comm_exposed_s, "the attention of the remote K/V blocks", "beyond the attention"),
        ),
        TimeTerm(
            "host dispatch",
            t.host_dispatch_s,
            t.host_dispatch_exposed_s,
            _hidden(
                t.host_dispatch_s,
                t.host_dispatch_exposed_s,
                "device work (asynchronous launch)",
                "the host runs each op",
            )
            if t.host_dispatch_s
            else "",
        ),
        TimeTerm("pp comm", t.pp_comm_s, t.pp_comm_s, "pipeline sends and receives" if t.pp_comm_s else ""),
        TimeTerm(
            "activation offload", t.offload_s, t.offload_s, "beyond the compute it overlaps" if t.offload_s else ""
        ),
        TimeTerm(
            "bubble",
            t.bubble_s,
            t.bubble_s,
            f"{d.pipeline_parallel - 1} stages of fill and drain" if t.bubble_s else "",
        ),
        TimeTerm(
            "dp comm",
            max(t.dp_comm_s, t.dp_comm_exposed_s),
            t.dp_comm_exposed_s,
            _switched(t.dp_comm_s, t.dp_comm_exposed_s, comm.dp_overlap, zero_sync),
        ),
        TimeTerm("optimizer", t.optimizer_s, t.optimizer_s, f"ZeRO-{k.zero_stage}, offload {k.offload}"),
    ]


def _row(rank: str, p: Plan) -> str:
    d, k = p.parallel, p.memory_knobs
    return (
        f"| {rank} | {d.tensor_parallel} | {d.pipeline_parallel} | {d.virtual_pipeline_stages} | "
        f"{d.expert_parallel} | {d.expert_tensor_parallel} | {d.context_parallel} | {d.data_parallel} | "
        f"{d.micro_batch} | {k.recompute} | {k.zero_stage} | {k.offload} | "
        f"{p.memory.total_bytes / GIB:.1f} | {p.time.step_s:.3f}{_range(p.step_band_s)} | {p.time.tokens_per_s:,.0f} | "
        f"{p.time.mfu:.1%} |"
    )


def _range(band_s: tuple[float, float] | None) -> str:
    return f" ({band_s[0]:.3g}-{band_s[1]:.3g})" if band_s else ""


def plan_table(report: PlanSearch, top: int = 10) -> str:
    """The ranked plans; when none fits, the closest setups first, each with why it does not fit."""
    head = (
        "| # | TP | PP | VPP | EP | ETP | CP | DP | mb | recompute | ZeRO | offload | GiB | step s (band) | "
        "tokens/s | MFU |\n|---" + "|---" * 15 + "|"
    )
    rows = [_row("-", p) + f" does not fit: {p.reason} |" for p in report.closest_infeasible]
    rows += [_row(str(p.rank), p) for p in report.plans[:top]]
    return "\n".join([head, *rows])


def _memory_section(p: Plan) -> str:
    from day0.planner.results import MEMORY_TERMS

    m = p.memory
    rows = [(name.removesuffix("_bytes").replace("_", " "), getattr(m, name)) for name in MEMORY_TERMS]
    body = "\n".join(f"| {n} | {v / GIB:.2f} |" for n, v in rows)
    return (
        f"## Memory of the best plan (stage {m.peak_stage}, {m.inflight_microbatches:g} micro-batches in flight)"
        f"\n\n| term | GiB |\n|---|---|\n{body}\n| **total** | **{m.total_bytes / GIB:.2f}** of "
        f"{m.capacity_bytes / GIB:.0f} |"
    )


def _time_section(p: Plan, options: PlannerOptions) -> str:
    terms = time_terms(p, options)
    body = "\n".join(f"| {t.name} | {t.total_s:.3f} | {t.critical_s:.3f} | {t.note} |" for t in terms)
    t = p.time
    return (
        "## Time of the best plan\n\n| term | s | on the critical path s | |\n|---|---|---|---|\n"
        f"{body}\n| **step** | | **{sum(x.critical_s for x in terms):.3f}** | the critical path's sum |\n\n"
        f"MFU {t.mfu:.1%}, {t.tokens_per_s:,.0f} tokens/s"
    )


def _elastic_section(report: PlanSearch) -> list[str]:
    if not report.elastic:
        return []
    rows = [
        f"| {e.label} | {e.accelerators} | {e.degrees or '-'} | "
        + (
            f"{e.step_s:.3f}{_range(e.step_band_s)} | {e.memory_gib:.1f} | {e.mfu:.1%} |"
            if e.feasible
            else f"- | - | - | {e.message}"
        )
        for e in report.elastic
    ]
    return [
        "",
        "## Elastic cluster",
        "",
        "| size | accelerators | plan | step s (band) | GiB | MFU |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def report_markdown(report: PlanSearch, j: Judgement, top: int = 10, images: bool = True) -> str:
    c = report.cluster
    hw, tr = c.hardware, report.training
    lines = [
        f"# Step 3: parallel plan for `{report.model}`: {j.verdict.upper()}",
        "",
        *[f"- {label}: {value}" for label, value in j.headline.items()],
        *[f"- **{j.verdict}**: {r}" for r in j.reasons],
        "",
        f"- cluster: {c.accelerators} accelerators ({c.per_node}/node, {hw.figure('memory_gib'):g} GiB, "
        f"{hw.figure('bf16_tflops'):g} bf16 TFLOP/s, {hw.figure('intra_node_bandwidth_gbps'):g}/"
        f"{hw.figure('inter_node_bandwidth_gbps'):g} GB/s intra/inter-node)",
        f"- training: seq {tr.seq_len}, global batch {tr.global_batch}, "
        f"compute {tr.precision.compute}, master {tr.precision.master_weights}",
        f"- search: {report.tuples_considered} degree tuples, {report.configurations_evaluated} configurations "
        f"evaluated in {report.search_seconds:.2f} s",
    ]
    if report.options.pinned:
        lines.append("- pinned: " + ", ".join(f"{k} ({v})" for k, v in report.options.pinned.items()))
    lines += ["", f"**{report.message}**", ""]
    if report.plans or report.closest_infeasible:
        lines += [plan_table(report, top)]
    if report.plans:
        lines += ["", _memory_section(report.plans[0]), ""]
        lines += ["![memory per accelerator by term](memory.png)", ""] if images else []
        lines += [_time_section(report.plans[0], report.options)]
    lines += _elastic_section(report)
    if report.advice:
        lines += ["", "## What to do next", "", *[f"- {a}" for a in report.advice]]
    if report.infeasible:
        lines += ["", "## Rejected", "", "| reason | tuples |", "|---|---|"]
        lines += [f"| {i.reason} | {i.count} |" for i in report.infeasible[:10]]
    lines += ["", _assumptions(report)]
    lines += [f"- note: {n}" for n in [*c.notes, *report.notes]]
    return "\n".join(lines) + "\n"


def _assumptions(report: PlanSearch) -> str:
    o, compute = report.options, report.training.precision.compute
    measured = len(o.gemm_points(compute))
    gemms = (
        f"GEMMs at the rates calibrated for {measured} {compute} shapes"
        if measured
        else f"GEMMs on a roofline at up to {o.gemm_fraction(compute):.0%} of the {compute} peak"
    )
    schedule = "DualPipe" if o.dualpipe else "1F1B / interleaved 1F1B"
    return (
        f"- assumptions ({o.profile} profile): {gemms}, "
        f"memory-bound kernels at {o.hbm_bandwidth_gbps:g} GB/s, collectives at "
        f"{o.collective_efficiency:.0%} of the link figures, "
        f"{'FlashAttention' if o.flash_attention else 'stored attention scores'}, fused norm/SwiGLU kernels, "
        f"TP {'with' if o.sequence_parallel else 'without'} sequence parallelism, "
        f"{o.grad_dtype} gradients, {o.optimizer_state_dtype} Adam moments, "
        f"{o.fragmentation_fraction:.0%} fragmentation reserve + {o.framework_overhead_gib:g} GiB runtime, "
        f"{schedule} pipeline; MFU against the peak of the GEMM dtype"
        + (f"; step-time band: {report.band.basis}" if report.band else "")
    )
