"""A layer of the release's real weights on the platform: one decoder layer (attention and, for MoE,
the router and a few experts) with slices of the embedding and LM head, streamed from the shards,
FP8 block-scaled weights dequantised, run forward and backward against the reference by
`compare_layers`, beside the random-weight check. Real weights carry the value ranges a platform's
kernels meet in production; random ones do not.

Contract:
- `check_real_weights(whole, platform, compute_dtype, validation)` -> `RealWeightsCheck`: a missing
  shard, a tensor of the wrong shape, a scale tensor that is missing, misshaped or not finite and
  positive are `problems` naming the file and tensor (a shard whose header is corrupt raises
  `ModelError` naming the file, as step 1 does). A release without weights here (config only, or a
  hub source's index without its shards) is `not_run`, never a pass. Against fp64 always.
- Only the tensors the layer needs are read (safetensors `safe_open`, row slices for the embedding,
  head and router), and only when the estimate fits `budget_bytes`; fewer experts are kept until it does.
- The layer kept is the last of `whole.keep_layers` (the first of each distinct kind: the first MoE
  layer where dense layers come first); it runs on the embedding's output, not on earlier layers'.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import TYPE_CHECKING

import torch

from day0.model.build import load_hf_config
from day0.model.plausible import EXPERT_KEYS
from day0.model.release import FP8_DTYPES, INDEX_FILE, SINGLE_FILE, expected_tensors, read_index, read_shard_header
from day0.platforms.kernels import Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.layers import WholeModel, _trim, compare_layers
from day0.steps.operators.result import BUDGET_BYTES, BYTES_PER_PARAM, RealWeightsCheck

if TYPE_CHECKING:
    from safetensors import safe_open
    from transformers import PretrainedConfig, PreTrainedModel

__all__ = ["check_real_weights", "dequantize_fp8"]

EXPERTS = 4  # routed experts kept at most: enough for top-k routing to choose among them
VOCAB_ROWS = 1024  # embedding and head rows kept: the tokens the check draws from
BLOCK = [128, 128]  # DeepSeek-V3's weight_block_size, when quantization_config does not say


def dequantize_fp8(
    weight: torch.Tensor, scale: torch.Tensor, block: list[int] | None, where: str
) -> tuple[torch.Tensor | None, str | None]:
    """fp32 weight = fp8 x scale, the scale per `block` (rows x columns; None: one per tensor), as
    transformers' `_dequantize_fp8_weight` and DeepSeek-V3's `weight_dequant` compute it. (None, why)
    for a scale tensor of the wrong shape or with values not finite and positive."""
    rows, cols = weight.shape[-2:] if weight.dim() >= 2 else (weight.numel(), 1)
    want = [math.ceil(rows / block[0]), math.ceil(cols / block[1])] if block else []
    if (block and list(scale.shape) != want) or (not block and scale.numel() != 1):
        return None, f"{where}: shape {list(scale.shape)}, the weight {list(weight.shape)} needs {want or [1]}"
    scale = scale.float()
    bad = int((~torch.isfinite(scale) | (scale <= 0)).sum())
    if bad:
        return None, f"{where}: {bad} of {scale.numel()} scales are not finite and positive"
    if block:
        scale = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    out = weight.float() * scale
    if not torch.isfinite(out).all():
        return None, f"{where}: the dequantised weight is not finite"
    return out, None


def check_real_weights(
    whole: WholeModel,
    platform: Platform,
    compute_dtype: str,
    validation: ValidationSpec | None = None,
    *,
    budget_bytes: int = BUDGET_BYTES,
    experts: int = EXPERTS,
    vocab_rows: int = VOCAB_ROWS,
) -> RealWeightsCheck:
    """Stream one layer of the release in `whole.model.directory` and compare it on `platform`."""
    resolved = whole.model
    directory, source = resolved.directory, resolved.source
    check = RealWeightsCheck(directory=directory, budget_bytes=budget_bytes)
    if (directory / INDEX_FILE).is_file():
        weight_map, _ = read_index(directory / INDEX_FILE, source)
    elif (directory / SINGLE_FILE).is_file():
        weight_map = {t.name: SINGLE_FILE for t in read_shard_header(directory / SINGLE_FILE, source).tensors}
    else:
        check.not_run = f"the release has no weights here (config only): neither {INDEX_FILE} nor {SINGLE_FILE}"
        return check
    shards = sorted(set(weight_map.values()))
    if not any((directory / f).is_file() for f in shards):  # a hub source is fetched without its weights
        check.not_run = (
            f"the release has no weights here: none of the {len(shards)} shards in {INDEX_FILE} is in {directory}"
        )
        return check
    layer = whole.keep_layers[-1]
    check.layer = layer
    cfg = load_hf_config(resolved)
    routed = next((getattr(cfg, a) for a in EXPERT_KEYS if isinstance(getattr(cfg, a, None), int)), None)
    vocab = min(vocab_rows, cfg.vocab_size)
    for kept in range(min(experts, routed), 0, -1) if routed else [None]:
        meta = _meta_model(_reduced_config(cfg, layer, kept, vocab), layer, resolved.trust_remote_code)
        params = sum(p.numel() for p in meta.parameters())
        if params * BYTES_PER_PARAM <= budget_bytes:
            break
    check.params, check.estimate_bytes, check.vocab_rows = params, params * BYTES_PER_PARAM, vocab
    if kept is not None:
        check.experts = f"{kept} of {routed} routed experts (the router's rows for them)"
    if check.estimate_bytes > budget_bytes:
        check.not_run = (
            f"layer {layer} needs about {check.estimate_bytes / 2**30:.1f} GiB with "
            f"{kept or 'no'} routed experts, beyond the budget of {budget_bytes / 2**30:.1f} GiB"
        )
        return check
    quant = resolved.config.get("quantization_config")
    block = quant.get("weight_block_size", BLOCK) if isinstance(quant, dict) else BLOCK
    state = _stream(check, meta, layer, weight_map, block if isinstance(block, list) else BLOCK, source)
    if check.problems:
        return check
    model = _load(check, meta, state)
    if check.problems:
        return check
    # against fp64 whatever the spec's reference: real weights' error is what is being measured
    fp64 = (validation or ValidationSpec()).model_copy(update={"reference_dtype": "fp64"})
    report = compare_layers(model, platform, compute_dtype, fp64, name=f"{source} layer {layer} (real weights)")
    inner = "layers.0"  # the trimmed model's one decoder layer
    for row in report.rows:  # the release's own numbering
        row.module = f"layers.{layer}" if row.module == inner else row.module
    if report.first_divergent == inner:
        report.first_divergent = f"layers.{layer}"
    check.layers = report
    return check


def _reduced_config(cfg: PretrainedConfig, layer: int, experts: int | None, vocab: int) -> PretrainedConfig:
    """`cfg` down to layers 0..`layer`, `experts` routed experts (one routing group), `vocab` tokens."""
    cfg = cfg.__class__.from_dict(cfg.to_dict())
    cfg.num_hidden_layers = layer + 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[: layer + 1]
    cfg.use_cache = False
    cfg.vocab_size = vocab
    if isinstance(getattr(cfg, "pad_token_id", None), int) and cfg.pad_token_id >= vocab:
        cfg.pad_token_id = None  # an index past the rows kept
    if experts is not None:
        for attr in EXPERT_KEYS:
            if isinstance(getattr(cfg, attr, None), int):
                setattr(cfg, attr, experts)
        cfg.num_experts_per_tok = min(getattr(cfg, "num_experts_per_tok", experts) or experts, experts)
        for attr in ("n_group", "topk_group"):  # group-limited routing needs the experts split in groups
            if getattr(cfg, attr, None):
                setattr(cfg, attr, 1)
    return cfg


def _meta_model(cfg: PretrainedConfig, layer: int, trust_remote_code: bool) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, trust_remote_code=trust_remote_code)
    return _trim(model, [layer])


_LAYER0 = re.compile(r"(^|\.)layers\.0\.")


def _stream(
    check: RealWeightsCheck,
    meta: PreTrainedModel,
    layer: int,
    weight_map: dict[str, str],
    block: list[int],
    source: str,
) -> dict[str, torch.Tensor]:
    """The checkpoint tensors of `meta` (named as the trimmed model's checkpoint), read from the shards:
    row slices where the model keeps fewer rows, FP8 weights dequantised to fp32."""
    from safetensors import safe_open

    wanted = {}  # checkpoint name -> (trimmed model's name, shape)
    for name, expected in expected_tensors(meta, None).items():
        ckpt = _LAYER0.sub(rf"\g<1>layers.{layer}.", name, count=1)
        if ckpt in weight_map:
            wanted[ckpt] = (name, expected.shape)
        elif not expected.optional:
            check.problems.append(f"{INDEX_FILE}: tensor {ckpt!r} of layer {layer} is not in the checkpoint")
    by_file: dict[str, list[str]] = defaultdict(list)
    for ckpt in wanted:
        by_file[weight_map[ckpt]].append(ckpt)
    headers = {}
    for file in sorted(by_file):
        path = check.directory / file
        if not path.is_file():
            check.problems.append(f"{file}: holds {by_file[file][0]!r} but is not in {check.directory}")
            continue
        headers[file] = {t.name: t for t in read_shard_header(path, source).tensors}
    if check.problems:
        return {}
    state: dict[str, torch.Tensor] = {}
    for file, names in sorted(by_file.items()):
        check.files.append(file)
        with safe_open(str(check.directory / file), framework="pt") as f:
            for ckpt in sorted(names):
                name, shape = wanted[ckpt]
                entry = headers[file][ckpt]
                tensor, problem = _read(f, ckpt, entry.shape or [], shape, file)
                if problem:
                    check.problems.append(problem)
                    continue
                assert tensor is not None
                check.tensors += 1
                check.bytes_read += tensor.numel() * tensor.element_size()
                if entry.dtype in FP8_DTYPES:
                    tensor, problem = _dequantize(check, ckpt, tensor, weight_map, block, source)
                    if problem:
                        check.problems.append(problem)
                        continue
                    assert tensor is not None
                state[name] = tensor.float()
    return state


def _read(
    f: safe_open, ckpt: str, stored: list[int], shape: list[int], file: str
) -> tuple[torch.Tensor | None, str | None]:
    """`ckpt` whole, or its first rows where the model keeps fewer (embedding, head, router)."""
    rows = stored[0] > shape[0] and stored[1:] == shape[1:] if stored and shape and len(stored) == len(shape) else False
    if stored != shape and not rows:
        return None, f"{file}: tensor {ckpt!r} is {stored} in the checkpoint, the model's is {shape}"
    from safetensors import SafetensorError

    try:
        tensor = f.get_slice(ckpt)[: shape[0]] if rows else f.get_tensor(ckpt)
    except SafetensorError as exc:
        return None, f"{file}: tensor {ckpt!r} does not read: {exc}"
    return tensor, None


def _dequantize(
    check: RealWeightsCheck,
    ckpt: str,
    weight: torch.Tensor,
    weight_map: dict[str, str],
    block: list[int],
    source: str,
) -> tuple[torch.Tensor | None, str | None]:
    from safetensors import safe_open

    # weight_scale_inv: one per block (DeepSeek-V3, Kimi K2); weight_scale: one per tensor
    scale_name, scale_block = next(
        ((ckpt + s, b) for s, b in (("_scale_inv", block), ("_scale", None)) if ckpt + s in weight_map), (None, None)
    )
    if scale_name is None:
        return None, f"{weight_map[ckpt]}: FP8 tensor {ckpt!r} has no {ckpt}_scale_inv (nor _scale) in the checkpoint"
    file = weight_map[scale_name]
    if not (check.directory / file).is_file():
        return None, f"{file}: holds {scale_name!r} but is not in {check.directory}"
    with safe_open(str(check.directory / file), framework="pt") as f:
        scale = f.get_tensor(scale_name)
    check.tensors += 1
    check.bytes_read += scale.numel() * scale.element_size()
    if file not in check.files:
        check.files.append(file)
    out, why = dequantize_fp8(weight, scale, scale_block, f"{file}: scale tensor {scale_name!r}")
    check.dequantised += out is not None
    return out, why


def _load(check: RealWeightsCheck, meta: PreTrainedModel, state: dict[str, torch.Tensor]) -> PreTrainedModel:
    """`meta` materialised on the CPU with `state` loaded through transformers' own checkpoint
    conversion (per-expert tensors fused as the model keeps them)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig

    model = meta.to_empty(device="cpu")
    model.init_weights()  # buffers (rotary frequencies) that `to_empty` left unset
    mapping = get_model_conversion_mapping(model)
    config = LoadStateDictConfig(dtype=torch.float32, weight_mapping=mapping)  # type: ignore[arg-type]  # the same transforms, a narrower hint
    info, _ = convert_and_load_state_dict_in_model(model, state, config)
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    left = sorted((set(info.missing_keys) - tied) | set(info.mismatched_keys) | set(info.conversion_errors))
    model.tie_weights()
    if left:
        check.problems.append(f"transformers could not load {len(left)} tensors of the layer: {', '.join(left[:3])}")
    return model.eval()
