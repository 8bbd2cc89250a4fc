"""The release's own files, checked on release day: the tokenizer and its chat template, the safetensors
index and every shard's header (names, dtypes, shapes: never weight data) against the architecture
built on the meta device, FP8 weights with their scale tensors, and the context `rope_scaling` gives.

Contract:
- `check_release(resolved, meta_model)` -> `ReleaseCheck`: what the source's directory (a local folder,
  a hub-cache snapshot) holds, compared with `meta_model` (`day0.model.build.build_meta_model`).
  `problems` lists what is wrong with the release, each naming the file and the tensor; `not_checked`
  says which checks the files at hand could not make (a configs/ model has config.json only).
  With `online`, a hub source whose shards are not in the cache has every shard header read from the
  hub by range requests (`read_hub_headers`); offline, or when the hub does not answer, `not_checked`
  says so.
- A shard that is truncated, a header that is not safetensors JSON, or one that claims other bytes
  than the file holds raises `ModelError` naming the file (and the tensor): nothing is read past a
  header.
- `rope_context(config)` is pure and cheap (no torch): `day0.spec.checks` refuses a spec context
  length beyond its `supported` positions.
"""

import json
import math
import re
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, JsonValue

from day0.core.typing import HFConfigDict
from day0.errors import ModelError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from day0.model.source import ResolvedModel

__all__ = [
    "ExpectedTensor",
    "FP8Format",
    "ReleaseCheck",
    "RopeContext",
    "ShardHeader",
    "TensorEntry",
    "TokenizerCheck",
    "WeightsCheck",
    "check_release",
    "check_tokenizer",
    "compare_weights",
    "expected_tensors",
    "ignored_on_load",
    "read_index",
    "read_shard_header",
    "rope_context",
]

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "tiktoken.model", "vocab.json")
# Bytes per element of each safetensors dtype.
DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip
FP8_DTYPES = ("F8_E4M3", "F8_E5M2")
_TORCH_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL",
}  # fmt: skip
MAX_HEADER_BYTES = 100_000_000  # safetensors' own bound on a header
MAX_INDEX_BYTES = 64 << 20  # DeepSeek-V3's index is about 8 MiB (91k tensors), beyond a config's bound
LISTED = 100  # names kept per list in the result: a wholly wrong release must not bloat result.json
# A fixed text and conversation: the round trip and the chat template are checked on them.
ROUND_TRIP_TEXT = "day0 checks the release: 1,234 tokens, naïve café, 東京, emoji 🚀 and\ttabs.\n"
CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "2 + 3 = 5."},
    {"role": "user", "content": "And 4 + 4?"},
]
_SCALED_ROPE = ("yarn", "linear", "dynamic")  # positions = factor x original_max_position_embeddings


# --- rope scaling --------------------------------------------------------------------------------


class RopeContext(BaseModel):
    """The positions a config supports: `max_position_embeddings`, or what its rope scaling extends to."""

    kind: str = Field(description="rope_type (yarn, linear, dynamic, llama3, longrope ...), 'default' without.")
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    supported: int | None = Field(None, description="Longest context the config supports, tokens.")
    parameters: dict[str, JsonValue] = Field(default_factory=dict, description="rope_scaling as config.json writes it.")

    def describe(self) -> str:
        if self.kind == "default":
            return f"max_position_embeddings ({_n(self.max_position_embeddings)})"
        factor, original = self.factor, self.original_max_position_embeddings
        how = f"factor {factor:g}" if factor else "no factor"
        if factor and original and self.kind in _SCALED_ROPE:
            how += f" x original_max_position_embeddings {original:,}"
        return f"rope_scaling {self.kind} ({how}; max_position_embeddings {_n(self.max_position_embeddings)})"


def _n(value: int | None) -> str:
    return "absent" if value is None else f"{value:,}"


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def rope_context(config: HFConfigDict) -> RopeContext:
    """Parse `rope_scaling` (or transformers 5's `rope_parameters`) of a config.json, text config first."""
    text = config.get("text_config")
    cfg = text if isinstance(text, dict) else config
    positions = _positive_int(cfg.get("max_position_embeddings"))
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):  # per layer type (Gemma 3)
        rope = rope["full_attention"]
    kind = rope.get("rope_type") or rope.get("type") if isinstance(rope, dict) else None
    if not isinstance(rope, dict) or not isinstance(kind, str) or kind == "default":
        return RopeContext(kind="default", max_position_embeddings=positions, supported=positions)
    raw = rope.get("factor")
    factor = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) and raw > 0 else None
    original = _positive_int(rope.get("original_max_position_embeddings"))
    supported = positions
    if kind in _SCALED_ROPE and factor and (original or positions):
        # Qwen-style configs keep max_position_embeddings at the original and let YaRN extend it.
        supported = max(positions or 0, int(factor * (original or positions or 0)))
    return RopeContext(
        kind=kind,
        factor=factor,
        original_max_position_embeddings=original,
        max_position_embeddings=positions,
        supported=supported,
        parameters=rope,
    )


# --- safetensors headers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)  # a plain record: a release holds 90k of them (DeepSeek-V3)
class TensorEntry:
    """One tensor of the checkpoint: from a shard's header, or from the index alone (no dtype, shape)."""

    name: str
    file: str
    dtype: str | None = None
    shape: list[int] | None = None


@dataclass(frozen=True, slots=True)
class ShardHeader:
    file: str
    tensors: list[TensorEntry]
    bytes_by_dtype: dict[str, int]


def read_shard_header(path: Path, source: str) -> ShardHeader:
    """The header of one safetensors file (8-byte little-endian length, then JSON), checked against
    the file's size; `ModelError` naming the file (and tensor) for anything safetensors would refuse."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        rest = f.read(length) if length <= MAX_HEADER_BYTES else b""
    return _check_header(head + rest, size, path.name, lambda m: ModelError(source, path.name, f"{path}: {m}"))


def _check_header(data: bytes, size: int, name: str, refuse: Callable[[str], ModelError]) -> ShardHeader:
    """The header in `data` (the file's first bytes: at least the length and the JSON) of a safetensors
    file of `size` bytes, its tensors' spans checked to fill the rest of the file exactly."""
    if len(data) < 8:
        raise refuse(f"truncated: {size} bytes, less than the 8-byte header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > MAX_HEADER_BYTES or 8 + length > size or 8 + length > len(data):
        raise refuse(f"truncated or not safetensors: header claims {length:,} bytes, the file holds {size:,}")
    try:
        header = json.loads(data[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise refuse(f"header is not valid safetensors JSON ({exc})") from None
    if not isinstance(header, dict):
        raise refuse("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise refuse("__metadata__ is not a mapping of strings")
    tensors, by_dtype, end = _header_entries(header, name, refuse)
    data_bytes = size - 8 - length
    if end != data_bytes:
        what = "more bytes than the file holds (truncated?)" if end > data_bytes else "fewer bytes than the file holds"
        raise refuse(f"header claims {end:,} bytes of tensor data, {what}: {data_bytes:,} after the header")
    return ShardHeader(file=name, tensors=tensors, bytes_by_dtype=by_dtype)


def _header_entries(
    header: Mapping[str, object], file: str, refuse: Callable[[str], ModelError]
) -> tuple[list[TensorEntry], dict[str, int], int]:
    """(tensors, bytes per dtype, end of the data) of a parsed header, its spans checked for gaps and overlaps."""
    tensors, spans = [], []
    by_dtype: dict[str, int] = defaultdict(int)
    for tensor, info in header.items():
        entry, span = _tensor_entry(tensor, info, file, refuse)
        tensors.append(entry)
        spans.append((span, tensor))
        by_dtype[entry.dtype or ""] += span[1] - span[0]
    end = 0
    for (begin, stop), tensor in sorted(spans):
        if begin != end:
            raise refuse(f"tensor {tensor!r} starts at byte {begin:,} of the data, expected {end:,} (gap or overlap)")
        end = stop
    return tensors, dict(by_dtype), end


def _tensor_entry(
    tensor: str, info: object, file: str, refuse: Callable[[str], ModelError]
) -> tuple[TensorEntry, tuple[int, int]]:
    if not isinstance(info, dict):
        raise refuse(f"tensor {tensor!r}: expected an object with dtype, shape, data_offsets")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise refuse(f"tensor {tensor!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_positive_int(d) or d == 0 for d in shape):
        raise refuse(f"tensor {tensor!r}: shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise refuse(f"tensor {tensor!r}: data_offsets {offsets!r} is not [begin, end]")
    nbytes = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != nbytes:
        raise refuse(
            f"tensor {tensor!r}: {dtype} {shape} is {nbytes:,} bytes, its data_offsets span {offsets[1] - offsets[0]:,}"
        )
    return TensorEntry(name=tensor, file=file, dtype=dtype, shape=shape), (offsets[0], offsets[1])


HUB_HEAD_BYTES = 100_000  # as huggingface_hub's parse_safetensors_file_metadata: most headers fit


def read_hub_headers(resolved: "ResolvedModel", files: Iterable[str]) -> list[ShardHeader]:
    """The header of each of `files` in `resolved`'s hub repo at its commit, by HTTP range requests
    (the first 100 kB, then the rest of a longer header; never the weight data), checked as a local
    one is against the file's size from `Content-Range`. (huggingface_hub's `get_safetensors_metadata`
    reads the same bytes but gives neither the header's length nor the file's size.) Network errors
    propagate: the caller says which checks it could not make."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.errors import RemoteEntryNotFoundError
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    assert resolved.repo_id is not None
    revision = resolved.commit or resolved.revision
    headers, out = build_hf_headers(), []
    for file in files:
        url = hf_hub_url(resolved.repo_id, file, revision=revision)

        def get(begin: int, end: int, url: str = url) -> tuple[bytes, int]:
            response = get_session().get(
                url, headers={**headers, "Range": f"bytes={begin}-{end}"}, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT
            )
            hf_raise_for_status(response)
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            return response.content[: end - begin + 1], int(total) if total.isdigit() else len(response.content)

        def refuse(message: str, file: str = file) -> ModelError:
            return ModelError(resolved.source, file, f"{resolved.repo_id}@{revision}/{file}: {message}")

        try:
            data, size = get(0, HUB_HEAD_BYTES - 1)
        except RemoteEntryNotFoundError:
            raise refuse(f"listed in {INDEX_FILE} but not in the repo") from None
        length = struct.unpack("<Q", data[:8])[0] if len(data) >= 8 else 0
        if len(data) < 8 + length <= min(size, 8 + MAX_HEADER_BYTES):
            data = data[:8] + get(8, 7 + length)[0]
        out.append(_check_header(data, size, file, refuse))
    return out


def read_index(path: Path, source: str) -> tuple[dict[str, str], int | None]:
    """(tensor -> shard file, metadata.total_size) of a `model.safetensors.index.json`."""

    def refuse(message: str) -> ModelError:
        return ModelError(source, path.name, f"{path}: {message}")

    if path.stat().st_size > MAX_INDEX_BYTES:
        raise refuse(f"{path.stat().st_size:,} bytes, more than an index of {MAX_INDEX_BYTES:,}")
    try:  # json, not day0.yamlio's reader: its nesting scan costs a second on DeepSeek-V3's index
        index = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise refuse(f"not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise refuse("expected an object with a weight_map of tensor names to shard files")
    for tensor, file in weight_map.items():
        if not re.fullmatch(r"[\w.-]+\.safetensors", file) or file.startswith("."):
            raise refuse(f"tensor {tensor!r} maps to {file!r}, not a shard file name in the same folder")
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    return weight_map, total if isinstance(total, int) and not isinstance(total, bool) else None


# --- comparison with the architecture --------------------------------------------------------------


FP8Scheme = Literal["block-scaled", "per-tensor", "per-channel"]


class FP8Format(BaseModel):
    """One FP8 scheme found in the checkpoint."""

    scheme: FP8Scheme
    dtype: str = Field(description="safetensors dtype of the weights (F8_E4M3, F8_E5M2).")
    scale: str = Field(description="Name suffix of the scale tensors (weight_scale_inv, weight_scale).")
    block: list[int] | None = Field(None, description="Block of one scale (block-scaled), rows x columns.")
    tensors: int

    def describe(self) -> str:
        block = f" {self.block[0]}x{self.block[1]}" if self.block else ""
        return f"{self.scheme}{block} {self.dtype} with `{self.scale}` ({self.tensors:,} tensors)"


class WeightsCheck(BaseModel):
    index: str | None = Field(None, description="The index file read, if any.")
    shards: list[str] = Field(description="Shard files whose headers were read.")
    headers_read: bool = Field(description="False when only the index's names were compared.")
    tensors: int
    bytes_by_dtype: dict[str, int] = Field(default_factory=dict)
    index_total_size: int | None = None
    missing: list[str] = Field(default_factory=list, description=f"Model tensors absent (first {LISTED}).")
    unexpected: list[str] = Field(default_factory=list, description=f"Tensors the model lacks (first {LISTED}).")
    misshaped: list[str] = Field(default_factory=list)
    mistyped: list[str] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="Full counts of each list above.")
    ignored: int = Field(0, description="Tensors transformers ignores on load (e.g. a multi-token-prediction layer).")
    fp8: list[FP8Format] = Field(default_factory=list)
    scale_problems: list[str] = Field(default_factory=list)


class ExpectedTensor(BaseModel):
    shape: list[int]
    dtypes: list[str] = Field(description="Checkpoint dtypes the model accepts for it (empty: any float).")
    optional: bool = Field(False, description="Tied to another tensor, or one transformers lets a checkpoint miss.")


def compare_weights(
    entries: Iterable[TensorEntry],
    expected: Mapping[str, ExpectedTensor],
    ignore_unexpected: Iterable[str] = (),
    quantization_config: dict[str, JsonValue] | None = None,
) -> WeightsCheck:
    """Names, shapes and dtypes of a checkpoint against the model's (`shards` and `index` are the
    caller's to fill in). FP8 weights count with their scales, which the model does not list."""
    found = {e.name: e for e in entries}
    ignore = [re.compile(p) for p in ignore_unexpected]
    fp8, scale_names, scale_problems = _fp8_formats(found, quantization_config or {})
    missing = sorted(n for n, x in expected.items() if n not in found and not x.optional)
    unexpected, ignored = [], 0
    for name in sorted(set(found) - set(expected) - scale_names):
        if any(p.search(name) for p in ignore):
            ignored += 1
        else:
            unexpected.append(f"{name} ({found[name].file})")
    misshaped, mistyped = [], []
    for name, entry in sorted(found.items()):
        want = expected.get(name)
        if want is None or entry.shape is None:
            continue
        if entry.shape != want.shape:
            misshaped.append(f"{name} ({entry.file}): {entry.shape}, the model has {want.shape}")
        # An FP8 weight is checked with its scale (`_fp8_formats`), not as a dtype of its own.
        if want.dtypes and entry.dtype not in want.dtypes and entry.dtype not in FP8_DTYPES:
            mistyped.append(f"{name} ({entry.file}): {entry.dtype}, the model expects {' or '.join(want.dtypes)}")
    lists = {"missing": missing, "unexpected": unexpected, "misshaped": misshaped, "mistyped": mistyped}
    return WeightsCheck(
        shards=[],
        headers_read=any(e.shape is not None for e in found.values()),
        tensors=len(found),
        counts={k: len(v) for k, v in lists.items()},
        ignored=ignored,
        fp8=fp8,
        scale_problems=scale_problems,
        missing=missing[:LISTED],
        unexpected=unexpected[:LISTED],
        misshaped=misshaped[:LISTED],
        mistyped=mistyped[:LISTED],
    )


def _fp8_formats(
    found: Mapping[str, TensorEntry], quantization_config: dict[str, JsonValue]
) -> tuple[list[FP8Format], set[str], list[str]]:
    """(schemes, scale tensor names, problems) of the FP8 weights: each `X.weight` at an FP8 dtype
    needs `X.weight_scale_inv` (one per block) or `X.weight_scale` (per tensor or output channel)."""
    block_cfg = quantization_config.get("weight_block_size")
    sizes = [b for b in block_cfg if type(b) is int] if isinstance(block_cfg, list) else []
    block = sizes if isinstance(block_cfg, list) and len(sizes) == len(block_cfg) == 2 else [128, 128]
    schemes: dict[tuple[FP8Scheme, str, str], int] = defaultdict(int)
    scales: set[str] = {n for n in found if n.endswith((".input_scale", ".activation_scale"))}
    # names only (an index without its shards): a scale beside its weight is one, whatever the dtypes
    scales |= {
        n
        for n, e in found.items()
        if e.dtype is None and any(n.endswith(s) and n.removesuffix(s) in found for s in ("_scale_inv", "_scale"))
    }
    problems = []
    for name, entry in found.items():
        if entry.dtype not in FP8_DTYPES:
            continue
        inv, plain = found.get(f"{name}_scale_inv"), found.get(f"{name}_scale")
        scale = inv or plain
        if scale is None:
            problems.append(f"{name}: {entry.dtype} in {entry.file} has no `{name}_scale_inv` nor `{name}_scale`")
            continue
        scales.add(scale.name)
        shape, scale_shape = entry.shape or [], scale.shape
        if inv is not None:
            want = [math.ceil(d / b) for d, b in zip(shape, block, strict=False)]
            if scale_shape is not None and len(shape) == 2 and scale_shape != want:
                problems.append(
                    f"{scale.name}: {scale_shape} in {scale.file}, {block[0]}x{block[1]} blocks of {shape} need {want}"
                )
            schemes[("block-scaled", entry.dtype or "", "weight_scale_inv")] += 1
        else:
            per_tensor = scale_shape is None or math.prod(scale_shape) == 1
            schemes[("per-tensor" if per_tensor else "per-channel", entry.dtype or "", "weight_scale")] += 1
    formats = [
        FP8Format(scheme=s, dtype=d, scale=c, block=block if s == "block-scaled" else None, tensors=n)
        for (s, d, c), n in sorted(schemes.items())
    ]
    return formats, scales, sorted(problems)


def expected_tensors(model: "PreTrainedModel", declared_dtype: str | None) -> dict[str, ExpectedTensor]:
    """The tensors a checkpoint of `model` holds, as transformers saves it (fused experts split back
    into per-expert tensors), with the dtypes it accepts: the release's declared dtype, and fp32 too
    where the model keeps a tensor at fp32 (a router's gate, a bias correction)."""
    from transformers.core_model_loading import revert_weight_conversion

    state = model.state_dict()
    main = _TORCH_NAMES.get(str(model.dtype).removeprefix("torch."))
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    may_miss = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_missing", None) or ()]
    out = {}
    for name, tensor in revert_weight_conversion(model, dict(state)).items():
        dtype = _TORCH_NAMES.get(str(tensor.dtype).removeprefix("torch."), str(tensor.dtype))
        if not tensor.is_floating_point():
            dtypes = [dtype]
        elif declared_dtype is None:
            dtypes = []
        else:
            dtypes = [declared_dtype] if dtype == main else sorted({declared_dtype, dtype})
        optional = name in tied or any(p.search(name) for p in may_miss)
        out[name] = ExpectedTensor(shape=list(tensor.shape), dtypes=dtypes, optional=optional)
    return out


def ignored_on_load(model: "PreTrainedModel") -> list[str]:
    """Patterns of checkpoint tensors transformers drops without a word when it loads `model`: the
    class's own, and the buffers old checkpoints still carry (as `_adjust_missing_and_unexpected_keys`)."""
    patterns = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    buffers = [name for name, _ in model.named_buffers()]
    if any(b.endswith("rotary_emb.inv_freq") for b in buffers):
        patterns.append(r"rotary_emb\.inv_freq")
    if any(b.endswith("position_ids") for b in buffers):
        patterns.append(r"(^|\.)position_ids$")
    return patterns


# --- tokenizer -------------------------------------------------------------------------------------


class TokenizerCheck(BaseModel):
    files: list[str]
    tokenizer_class: str
    vocab: int = Field(description="Tokens the tokenizer knows, special ones included.")
    round_trip: bool = Field(description="decode(encode(ROUND_TRIP_TEXT)) gave the text back.")
    tokens: int = Field(description="Tokens of the fixed text.")
    chat_template: str | None = Field(None, description="File holding the chat template, if any.")
    rendered: str | None = Field(None, description="The fixed conversation as the template renders it.")


def check_tokenizer(
    directory: Path, vocab_size: int | None, trust_remote_code: bool = False
) -> tuple[TokenizerCheck | None, list[str]]:
    """Load the tokenizer from local files only, round-trip a fixed text, render a fixed conversation.
    (None, [problem]) when it does not load; problems name the file."""
    from transformers import AutoTokenizer

    files = [f for f in TOKENIZER_FILES if (directory / f).is_file()]
    shown = ", ".join(files)
    try:
        tok = AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - any library error is the release's tokenizer failing
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        return None, [f"tokenizer ({shown} in {directory}) does not load: {type(exc).__name__}: {reason}"]
    problems = []
    ids = tok.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    back = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if back != ROUND_TRIP_TEXT:
        problems.append(f"tokenizer ({shown}): the round trip of {ROUND_TRIP_TEXT!r} gave {back[:120]!r}")
    if vocab_size is not None and len(tok) > vocab_size:
        problems.append(
            f"tokenizer ({shown}): {len(tok):,} tokens, beyond config.json's vocab_size {vocab_size:,} "
            "(ids past the embedding)"
        )
    template_file, rendered = None, None
    if getattr(tok, "chat_template", None):
        template_file = (
            "chat_template.jinja" if (directory / "chat_template.jinja").is_file() else "tokenizer_config.json"
        )
        try:
            rendered = tok.apply_chat_template(CONVERSATION, tokenize=False)
        except Exception as exc:  # noqa: BLE001 - a template error is the release's
            problems.append(f"chat template ({template_file}) does not render a conversation: {exc}")
        else:
            lost = [m["content"] for m in CONVERSATION if m["content"] not in str(rendered)]
            if lost:
                problems.append(f"chat template ({template_file}) drops message contents: {lost}")
    check = TokenizerCheck(
        files=files,
        tokenizer_class=type(tok).__name__,
        vocab=len(tok),
        round_trip=back == ROUND_TRIP_TEXT,
        tokens=len(ids),
        chat_template=template_file,
        rendered=str(rendered) if rendered is not None else None,
    )
    return check, problems


# --- the whole release -----------------------------------------------------------------------------


class ReleaseCheck(BaseModel):
    """What step 1 read of the release's own files, beyond config.json."""

    directory: Path
    tokenizer: TokenizerCheck | None = None
    weights: WeightsCheck | None = None
    quantization_config: dict[str, JsonValue] | None = Field(None, description="config.json's, as written.")
    rope: RopeContext
    not_checked: list[str] = Field(default_factory=list, description="Checks the files at hand could not make.")
    problems: list[str] = Field(default_factory=list, description="What is wrong, naming the file and tensor.")
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        w = self.weights
        parts = [f"tokenizer {'loads' if self.tokenizer else 'not loaded'}"]
        if w:
            parts.append(f"{w.tensors} tensors in {len(w.shards)} shard headers" if w.headers_read else "index only")
        parts += [f"{len(self.problems)} problems"] if self.problems else []
        parts += [f"{len(self.not_checked)} checks not made"] if self.not_checked else []
        return ", ".join(parts)

    def report_lines(self) -> list[str]:
        """Markdown lines: what was read, the format, the problems and what could not be checked."""
        lines = [f"Read from `{self.directory}` (headers only, no weight data)."]
        if t := self.tokenizer:
            lines.append(
                f"- tokenizer: `{t.tokenizer_class}` from {', '.join(t.files)}, {t.vocab:,} tokens; round trip of "
                f"a fixed text ({t.tokens} tokens) {'holds' if t.round_trip else 'FAILS'}; chat template: "
                + (f"`{t.chat_template}` renders {len(CONVERSATION)} messages" if t.chat_template else "none")
            )
        if w := self.weights:
            where = f"{len(w.shards)} shard headers" if w.headers_read else f"`{w.index}` only (no shard here)"
            lines.append(
                f"- weights: {w.tensors:,} tensors from {where}; missing {w.counts['missing']}, unexpected "
                f"{w.counts['unexpected']}, wrong shape {w.counts['misshaped']}, wrong dtype {w.counts['mistyped']}"
                + (f"; {w.ignored} that transformers ignores on load" if w.ignored else "")
            )
            if w.bytes_by_dtype:
                lines.append(
                    "- bytes per dtype: "
                    + ", ".join(f"{k} {v / 2**20:,.2f} MiB" for k, v in sorted(w.bytes_by_dtype.items()))
                    + f", adding up to the shards' sizes (index total_size: {_n(w.index_total_size)})"
                )
            lines += [f"- FP8 format: {f.describe()}" for f in w.fp8]
        q = self.quantization_config
        lines.append("- quantization_config: " + (", ".join(f"{k} {v}" for k, v in q.items()) if q else "none"))
        lines.append(f"- context: {self.rope.describe()}: supports {_n(self.rope.supported)} tokens")
        lines += [f"- PROBLEM: {p}" for p in self.problems]
        lines += [f"- note: {n}" for n in self.notes]
        lines += [f"- not checked: {n}" for n in self.not_checked]
        return lines


def _declared_dtype(config: HFConfigDict) -> str | None:
    text = config.get("text_config")
    cfg = text if isinstance(text, dict) else config
    name = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    return _TORCH_NAMES.get(name) if isinstance(name, str) else None


def _tokenizer_needs_code(directory: Path) -> bool:
    """Whether tokenizer_config.json maps AutoTokenizer to the repo's own code (Kimi K2's tiktoken one)."""
    try:
        config = json.loads((directory / "tokenizer_config.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        return False  # absent or unreadable: loading it says what is wrong
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    return isinstance(auto_map, dict) and "AutoTokenizer" in auto_map


def check_release(resolved: "ResolvedModel", model: "PreTrainedModel", online: bool = False) -> ReleaseCheck:
    """Check the files of `resolved.directory` against `model` (the architecture on the meta device);
    `online`: a hub source whose shards are not in the cache has their headers read from the hub."""
    quant = resolved.config.get("quantization_config")
    check = ReleaseCheck(
        directory=resolved.directory,
        rope=rope_context(resolved.config),
        quantization_config=quant if isinstance(quant, dict) else None,
    )
    _check_tokenizer_files(check, resolved)
    _check_weights(check, resolved, model, online)
    return check


def _check_tokenizer_files(check: ReleaseCheck, resolved: "ResolvedModel") -> None:
    directory, config = resolved.directory, resolved.config
    if not any((directory / f).is_file() for f in TOKENIZER_FILES):
        check.not_checked.append(f"tokenizer and chat template: no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    elif _tokenizer_needs_code(directory) and not resolved.trust_remote_code:
        check.not_checked.append(
            "tokenizer and chat template: tokenizer_config.json's auto_map names the repo's own tokenizer code, "
            "which runs only with model.trust_remote_code and the org in model.trusted_orgs"
        )
    else:
        vocab = _positive_int((config.get("text_config") or config).get("vocab_size"))
        check.tokenizer, problems = check_tokenizer(directory, vocab, resolved.trust_remote_code)
        check.problems += problems


def _hub_headers(check: ReleaseCheck, resolved: "ResolvedModel", files: list[str]) -> list[ShardHeader] | None:
    """`read_hub_headers`, or None with the reason in `check.not_checked` when the hub does not answer."""
    import httpx2  # huggingface_hub's transport: its connection errors are not OSErrors
    from huggingface_hub.errors import HfHubHTTPError

    try:
        found = read_hub_headers(resolved, files)
    except (HfHubHTTPError, OSError, httpx2.HTTPError) as exc:
        reason = " ".join(str(exc).split())[:200]
        check.not_checked.append(
            f"shard headers (shapes, dtypes, bytes, FP8 scales): the hub did not answer for {resolved.repo_id} "
            f"({type(exc).__name__}: {reason}); tensor names compared from the index only"
        )
        return None
    check.notes.append(
        f"{len(found)} shard headers of {resolved.repo_id} read from the hub by HTTP range requests "
        "(no weight data downloaded)"
    )
    return found


def _check_weights(
    check: ReleaseCheck, resolved: "ResolvedModel", model: "PreTrainedModel", online: bool = False
) -> None:
    directory, source, config = resolved.directory, resolved.source, resolved.config
    # Where the missing files would come from: a hub source is fetched without weights.
    hint = (
        f" (the hub is offline (HF_HUB_OFFLINE, DAY0_HUB_OFFLINE): go online to read the shard headers of "
        f"{resolved.repo_id} by range requests, or download its shards into the hub cache)"
        if resolved.repo_id and not online
        else ""
    )
    weight_map, total = None, None
    if (directory / INDEX_FILE).is_file():
        weight_map, total = read_index(directory / INDEX_FILE, source)
    elif (directory / SINGLE_FILE).is_file():
        weight_map = {}  # one unsharded file: its header is the whole map
    by_file: dict[str, list[str]] = defaultdict(list)
    for tensor, file in (weight_map or {}).items():
        by_file[file].append(tensor)
    files = sorted(by_file) or [SINGLE_FILE]
    present = [f for f in files if (directory / f).is_file()] if weight_map is not None else []
    headers = [read_shard_header(directory / f, source) for f in present]
    if weight_map and not present and resolved.repo_id and online:
        hub = _hub_headers(check, resolved, files)
        if hub is not None:
            headers, present = hub, files
    if weight_map is None:
        check.not_checked.append(f"weights: neither {INDEX_FILE} nor {SINGLE_FILE} in {directory}{hint}")
        return
    entries = [t for h in headers for t in h.tensors]
    if not present:  # a hub cache of config and tokenizer files: names from the index only
        check.not_checked.append(
            f"shard headers (shapes, dtypes, bytes, FP8 scales): none of the {len(files)} shards in {INDEX_FILE} "
            f"is in {directory}; tensor names compared from the index only{hint}"
        )
        entries = [TensorEntry(name=t, file=f) for t, f in weight_map.items()]
    else:
        for file in files:
            if file not in present:
                tensors = sorted(by_file[file])
                entries += [TensorEntry(name=t, file=file) for t in tensors]  # named once: by their shard
                check.problems.append(
                    f"{file}: listed in {INDEX_FILE} for {len(tensors)} tensors ({tensors[0]} ...) "
                    f"but not in {directory}"
                )
        for header in headers:
            listed, held = set(by_file.get(header.file, [])), {t.name for t in header.tensors}
            if weight_map and listed != held:
                odd = sorted(listed ^ held)
                check.problems.append(
                    f"{header.file}: its header and {INDEX_FILE} disagree on {len(odd)} tensors ({', '.join(odd[:3])})"
                )
    expected = expected_tensors(model, _declared_dtype(config))
    weights = compare_weights(entries, expected, ignored_on_load(model), check.quantization_config)
    by_dtype: dict[str, int] = defaultdict(int)
    for header in headers:
        for dtype, n in header.bytes_by_dtype.items():
            by_dtype[dtype] += n
    weights = weights.model_copy(
        update={
            "index": INDEX_FILE if weight_map else None,
            "shards": present,
            "bytes_by_dtype": dict(by_dtype),
            "index_total_size": total,
        }
    )
    check.weights = weights
    check.problems += _weight_problems(weights)
    if total is not None and headers and len(present) == len(files) and total != sum(by_dtype.values()):
        check.notes.append(
            f"{INDEX_FILE}: metadata.total_size {total:,} bytes, the shards' tensors hold {sum(by_dtype.values()):,}"
        )
    problems, notes = _quantization_findings(weights, check.quantization_config)
    check.problems += problems
    check.notes += notes


def _weight_problems(w: WeightsCheck) -> list[str]:
    out = []
    for kind, what in (
        ("missing", "model tensors missing from the checkpoint"),
        ("unexpected", "checkpoint tensors the model does not have"),
        ("misshaped", "tensors of the wrong shape"),
        ("mistyped", "tensors of the wrong dtype"),
    ):
        names: list[str] = getattr(w, kind)
        if names:
            more = f" and {w.counts[kind] - 3} more" if w.counts[kind] > 3 else ""
            out.append(f"{w.counts[kind]} {what}: {'; '.join(names[:3])}{more}")
    return out + [f"FP8 scale: {p}" for p in w.scale_problems]


def _quantization_findings(w: WeightsCheck, quant: dict[str, JsonValue] | None) -> tuple[list[str], list[str]]:
    """(problems, notes) of config.json's quantization_config against the FP8 tensors found."""
    n = sum(f.tensors for f in w.fp8)
    if not quant:
        if n:
            return [
                f"{n} FP8 tensors, but config.json has no quantization_config: transformers would load them unscaled"
            ], []
        return [], []
    if not w.headers_read:
        return [], []
    method, fmt = quant.get("quant_method"), quant.get("fmt")
    if method == "fp8" and not n:
        return [], ["quantization_config says fp8 but no tensor of the checkpoint is FP8"]
    wrong = [f.dtype for f in w.fp8 if isinstance(fmt, str) and not f.dtype.lower().endswith(fmt.lower())]
    if wrong:
        return [f"quantization_config.fmt is {fmt!r}, the checkpoint's FP8 tensors are {sorted(set(wrong))}"], []
    return [], []
