"""A chosen plan as the frameworks that run it take it: Megatron-LM / Megatron-Core command-line arguments
and a torchtitan job config (FSDP2 + TP/PP/CP/EP), with a note for every knob a framework has no
switch for.

Contract: pure. `framework_configs(plan, setup)` reads the plan's degrees, memory knobs and layer split
and the setup it was planned under (`FrameworkSetup`: training, options, communication, model layers).
Argument names are Megatron-LM's (`megatron/training/arguments.py` and the config dataclasses its
argument factory turns into flags: `--tensor-model-parallel-size`, `--recompute-granularity`,
`--use-distributed-optimizer`, `--pipeline-model-parallel-layout` ...); config keys are torchtitan's
`JobConfig` (`[parallelism] data_parallel_shard_degree`, `[activation_checkpoint] mode`, `[float8]
recipe_name` ...). An uneven layer split is written as Megatron's layout string ("Et*3|t*4|...|t*2,L":
E embedding, t a decoder layer, m an MTP layer, L the loss; stages in virtual-stage order) and
torchtitan's `module_fqns_per_model_part`.
"""

from dataclasses import dataclass

from pydantic import BaseModel, Field

from day0.core.typing import JsonObject
from day0.planner.inputs import CommSettings, PlannerOptions
from day0.planner.results import Plan
from day0.spec.pipeline import TrainingSpec

__all__ = ["GRAD_DTYPE_DEFAULTS", "FrameworkConfigs", "FrameworkSetup", "framework_configs", "to_toml"]

_MEGATRON_MODULES = {
    "core_attn": "core_attn",
    "layernorm": "layernorm",
    "mla_up_proj": "mla_up_proj",
    "moe_act": "moe_act",
}
_FP8_TORCHTITAN = {"tensorwise": "tensorwise", "delayed": "tensorwise", "blockwise": "rowwise"}
GRAD_DTYPE_DEFAULTS = {
    "Megatron-LM": (
        "fp32",
        "megatron/training/arguments.py: with --bf16, accumulate_allreduce_grads_in_fp32 is set unless "
        "--grad-reduce-in-bf16 ('accumulate and all-reduce gradients in fp32 for bfloat16 data type'); the "
        "DDP's main_grad buffer then is fp32",
    ),
    "torchtitan": (
        "fp32",
        "[training] mixed_precision_reduce defaults to float32 (FSDP2 MixedPrecisionPolicy reduce_dtype); the "
        "sharded gradients take the fp32 sharded parameters' dtype",
    ),
}
"""Where main gradients are kept by default in each framework this module writes for, with the source read:
a plan in the other dtype turns the framework's switch and says so."""


@dataclass(frozen=True)
class FrameworkSetup:
    training: TrainingSpec
    options: PlannerOptions
    comm: CommSettings
    num_layers: int  # decoder layers of the model (the plan's chunks add `options.mtp_layers` MTP layers)
    moe: bool
    per_node: int


class FrameworkConfigs(BaseModel):
    megatron: list[str] = Field(description="Megatron-LM / Megatron-Core arguments, one flag with its value each.")
    torchtitan: dict[str, JsonObject] = Field(description="torchtitan job config sections (TOML tables).")
    notes: list[str] = Field(default=[], description="What a framework cannot say as the plan does.")

    def to_yaml_dict(self) -> JsonObject:
        return {"megatron": list(self.megatron), "torchtitan": self.torchtitan, "notes": self.notes}

    def to_markdown(self) -> list[str]:
        lines = ["## Run it", "", "Megatron-LM (`pretrain_gpt.py` / Megatron-Core):", "", "```sh"]
        lines += [" \\\n".join(self.megatron), "```", "", "torchtitan (`--job.config_file`):", "", "```toml"]
        lines += [to_toml(self.torchtitan).rstrip(), "```"]
        return lines + [f"- {n}" for n in self.notes]


def to_toml(sections: dict[str, JsonObject]) -> str:
    """Tables of scalars and lists (all a torchtitan config needs; tomllib reads, the stdlib writes none)."""

    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    out = []
    for name, table in sections.items():
        out += [f"[{name}]", *(f"{k} = {value(v)}" for k, v in table.items()), ""]
    return "\n".join(out)


def _chunks(plan: Plan, setup: FrameworkSetup) -> list[list[str]]:
    """Each pipeline chunk's layers in virtual-stage order: E on the first, the MTP layers and L on the last."""
    sizes = plan.chunk_layers or [sum(plan.layers_per_stage)]
    mtp, total = setup.options.mtp_layers, sum(sizes)
    out, start = [], 0
    for c, size in enumerate(sizes):
        layers = ["m" if i >= total - mtp else "t" for i in range(start, start + size)]
        start += size
        out.append((["E"] if c == 0 else []) + layers + (["L"] if c == len(sizes) - 1 else []))
    return out


def _layout(chunks: list[list[str]]) -> str:
    def stage(items: list[str]) -> str:
        t = items.count("t")
        parts = [x for x in items if x == "E"] + ([f"t*{t}"] if t > 1 else ["t"] * t)
        return ",".join(parts + [x for x in items if x in "mL"])

    return "|".join(stage(c) for c in chunks)


def _megatron(plan: Plan, setup: FrameworkSetup, notes: list[str]) -> list[str]:
    d, k, o, tr, comm = plan.parallel, plan.memory_knobs, setup.options, setup.training, setup.comm
    args = [
        f"--num-layers {setup.num_layers}",
        f"--seq-length {tr.seq_len}",
        f"--tensor-model-parallel-size {d.tensor_parallel}",
        f"--pipeline-model-parallel-size {d.pipeline_parallel}",
        f"--context-parallel-size {d.context_parallel}",
    ]
    if setup.moe:
        args += [f"--expert-model-parallel-size {d.expert_parallel}"]
        args += [f"--expert-tensor-parallel-size {d.expert_tensor_parallel}"]
    if d.tensor_parallel > 1 and o.sequence_parallel:
        args.append("--sequence-parallel")
    args += [f"--micro-batch-size {d.micro_batch}", f"--global-batch-size {tr.global_batch}"]
    if o.mtp_layers:
        args.append(f"--mtp-num-layers {o.mtp_layers}")
    chunks, vpp = _chunks(plan, setup), d.virtual_pipeline_stages
    even = len({sum(x in "tm" for x in c) for c in chunks}) == 1 and not o.mtp_layers
    if d.pipeline_parallel > 1 and not even:
        args.append(f'--pipeline-model-parallel-layout "{_layout(chunks)}"')
    elif vpp > 1:
        args.append(f"--num-layers-per-virtual-pipeline-stage {setup.num_layers // (d.pipeline_parallel * vpp)}")
    args += _megatron_recompute(plan, o, notes)
    if k.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    elif k.zero_stage >= 2:
        strategy = "optim_grads" if k.zero_stage == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}"]
    if comm.dp_overlap and d.dense_replicas > 1:
        args.append("--overlap-grad-reduce")
        args += ["--overlap-param-gather"] if k.zero_stage >= 1 else []
    if comm.tp_overlap and d.tensor_parallel > 1:
        args.append("--tp-comm-overlap")
    if comm.ep_overlap and d.expert_parallel > 1:
        args.append("--overlap-moe-expert-parallel-comm")
    if comm.grad_reduce_dtype == "bf16" or o.grad_dtype == "bf16":
        args.append("--grad-reduce-in-bf16")
    _grad_note("Megatron-LM", o.grad_dtype, notes)
    args.append("--bf16")
    if tr.precision.compute == "fp8":
        args += [f"--fp8-format {o.fp8_format}", f"--fp8-recipe {o.fp8_recipe}"]
    if o.optimizer_state_dtype == "bf16":
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    if "optimizer" in k.offload:
        args += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer"]
    if "activations" in k.offload:
        args.append(f"--cpu-offloading-num-layers {max(plan.layers_per_stage)}")
    if setup.moe:  # as the plan costs them: Megatron's own defaults are allgather and one expert at a time
        args.append(f"--moe-token-dispatcher-type {o.moe_token_dispatcher}")
        args += ["--moe-enable-deepep"] if o.moe_token_dispatcher == "flex" else []
        args += ["--moe-grouped-gemm"] if o.moe_grouped_gemm else []
    if setup.moe and o.expert_max_nodes and d.expert_parallel > setup.per_node:
        groups = d.expert_parallel * d.expert_tensor_parallel // setup.per_node
        args += [f"--moe-router-num-groups {groups}", f"--moe-router-group-topk {o.expert_max_nodes}"]
    if o.dualpipe:
        notes.append("Megatron-LM has no DualPipe schedule: the arguments give interleaved 1F1B's layout")
    if comm.dispatch_dtype == "fp8" and o.moe_token_dispatcher != "flex":
        notes.append("fp8 MoE dispatch: Megatron-Core reaches it through DeepEP (--moe-token-dispatcher-type flex)")
    return list(dict.fromkeys(args))


def _megatron_recompute(plan: Plan, o: PlannerOptions, notes: list[str]) -> list[str]:
    rc = plan.memory_knobs.recompute
    if rc == "full":
        return [
            "--recompute-granularity full",
            f"--recompute-method {o.recompute_method}",
            f"--recompute-num-layers {o.recompute_num_layers}",
        ]
    if rc == "selective":
        mods = [_MEGATRON_MODULES[m] for m in o.selective_modules if m in _MEGATRON_MODULES]
        if "mlp_act" in o.selective_modules:
            notes.append("selective mlp_act (a dense MLP's activation) has no Megatron-Core module: left out")
        return ["--recompute-granularity selective"] + ([f"--recompute-modules {' '.join(mods)}"] if mods else [])
    return []


def _grad_note(framework: str, grad_dtype: str, notes: list[str]) -> None:
    default, source = GRAD_DTYPE_DEFAULTS[framework]
    if grad_dtype != default:
        notes.append(f"{framework} keeps {default} gradients by default ({source}): the plan's {grad_dtype} is set")


def _torchtitan(plan: Plan, setup: FrameworkSetup, notes: list[str]) -> dict[str, JsonObject]:
    d, k, o, tr, comm = plan.parallel, plan.memory_knobs, setup.options, setup.training, setup.comm
    dp = d.data_parallel
    shard, replicate, reshard = (
        (1, dp, "default") if k.zero_stage == 0 else (dp, 1, "never" if k.zero_stage < 3 else "default")
    )
    if k.zero_stage == 1:
        notes.append("torchtitan has no ZeRO-1: FSDP2 with reshard_after_forward never (ZeRO-2) is the nearest")
    parallelism: JsonObject = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
        "tensor_parallel_degree": d.tensor_parallel,
        "enable_async_tensor_parallel": comm.tp_overlap and d.tensor_parallel > 1,
        "pipeline_parallel_degree": d.pipeline_parallel,
        "context_parallel_degree": d.context_parallel,
        "expert_parallel_degree": d.expert_parallel,
        "expert_tensor_parallel_degree": d.expert_tensor_parallel,
    }
    if d.pipeline_parallel > 1:
        schedule = "DualPipeV" if o.dualpipe else ("Interleaved1F1B" if d.virtual_pipeline_stages > 1 else "1F1B")
        parallelism["pipeline_parallel_schedule"] = schedule
        parallelism["pipeline_parallel_microbatch_size"] = d.micro_batch
        parallelism["module_fqns_per_model_part"] = _fqns(_chunks(plan, setup))
        if o.mtp_layers:
            notes.append("torchtitan's model parts name no MTP module: the MTP layers are left out of them")
    mode = {"none": "none", "selective": "selective", "full": "full"}[k.recompute]
    ac: JsonObject = {"mode": mode}
    if k.recompute == "selective":
        ac["selective_ac_option"] = "op"
        notes.append("torchtitan's selective recompute is per-op (matmul outputs kept), not by module")
    if k.recompute == "full" and (o.recompute_method == "block" or o.recompute_num_layers > 1):
        notes.append(
            f"torchtitan recomputes every layer under mode full (the plan: {o.recompute_method}, "
            f"{o.recompute_num_layers} layers)"
        )
    training: JsonObject = {
        "local_batch_size": tr.global_batch // dp,
        "global_batch_size": tr.global_batch,
        "seq_len": tr.seq_len,
        "mixed_precision_param": "bfloat16",
        "mixed_precision_reduce": "bfloat16"
        if o.grad_dtype == "bf16" or comm.grad_reduce_dtype == "bf16"
        else "float32",
    }
    _grad_note("torchtitan", o.grad_dtype, notes)
    if "optimizer" in k.offload:
        training["enable_cpu_offload"] = True
        notes.append("torchtitan's enable_cpu_offload moves parameters and gradients too, not only the optimizer")
    if "activations" in k.offload:
        notes.append("torchtitan has no activation offload switch")
    out: dict[str, JsonObject] = {"training": training, "parallelism": parallelism, "activation_checkpoint": ac}
    if tr.precision.compute == "fp8":
        if o.fp8_recipe == "mxfp8":
            out["model"], out["mx"] = {"converters": ["mx"]}, {"recipe_name": "mxfp8"}
        else:
            out["model"], out["float8"] = {"converters": ["float8"]}, {"recipe_name": _FP8_TORCHTITAN[o.fp8_recipe]}
            if o.fp8_recipe != _FP8_TORCHTITAN[o.fp8_recipe]:
                notes.append(
                    f"torchtitan has no {o.fp8_recipe} fp8 recipe: {_FP8_TORCHTITAN[o.fp8_recipe]} is the nearest"
                )
    return out


def _fqns(chunks: list[list[str]]) -> list[list[str]]:
    """torchtitan's module names per model part: tok_embeddings, layers.i, norm and output."""
    out, layer = [], 0
    for c in chunks:
        part = ["tok_embeddings"] if "E" in c else []
        for x in c:
            if x == "t":
                part.append(f"layers.{layer}")
                layer += 1
        out.append(part + (["norm", "output"] if "L" in c else []))
    return out


def framework_configs(plan: Plan, setup: FrameworkSetup) -> FrameworkConfigs:
    notes: list[str] = []
    megatron = _megatron(plan, setup, notes)
    return FrameworkConfigs(
        megatron=megatron, torchtitan=_torchtitan(plan, setup, notes), notes=list(dict.fromkeys(notes))
    )
