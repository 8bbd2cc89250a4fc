"""Weight-only quantisation of the served model, and what it actually covered.

Why two paths: torchao's `quantize_` converts `nn.Linear` weights (int8 per output channel, or fp8
e4m3 per channel), but transformers 5 stores MoE experts as fused 3-D parameters
(`experts.gate_up_proj[E, 2I, H]`, `experts.down_proj[E, H, I]`) that no Linear-based quantiser sees,
and in an MoE model the experts are most of the weights. So the experts are quantised here per
expert and per output channel with torchao's affine primitives (`choose_qparams_affine`,
`quantize_affine`, `dequantize_affine`), stored as int8 (or fp8) with their scales, and dequantised
when the layer runs (weight-only: activations stay in the compute dtype). The report says which
share of the weights was quantised, so a quantiser that skips the experts cannot pass unnoticed.

On the CPU, fp8 has no matmul kernel: it saves storage only (the weights are upcast to compute).
Sizes are measured by serialising the state dict (torchao's tensor subclasses report their logical
dtype, not their storage).
"""

from __future__ import annotations

import io
from typing import Literal, Protocol

import torch
from pydantic import BaseModel, Field, computed_field

from day0.core.library_logs import quiet_known_library_logs

__all__ = [
    "ExpertCodec",
    "Fp8PerChannel",
    "Int8PerChannel",
    "QuantMethod",
    "QuantizationReport",
    "quantize_model",
    "state_dict_bytes",
]

quiet_known_library_logs()  # before torchao is imported (here or by transformers)

QuantMethod = Literal["int8-weight", "fp8"]
_EXPERT_WEIGHTS = ("gate_up_proj", "down_proj")


class ExpertCodec(Protocol):
    """Quantises one fused 3-D expert weight per expert and per output channel, and back."""

    storage_dtype: torch.dtype

    def encode(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def decode(self, data: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor: ...


def _block(weight: torch.Tensor) -> tuple[int, ...]:
    """One quantisation group per (expert, output channel): the whole input dimension."""
    return (1,) * (weight.dim() - 1) + (weight.shape[-1],)


class Int8PerChannel:
    """Symmetric int8, one scale per expert and output channel (torchao's affine primitives)."""

    storage_dtype = torch.int8

    def encode(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine

        block = _block(weight)
        scale, zero = choose_qparams_affine(weight, MappingType.SYMMETRIC, block, torch.int8)
        return quantize_affine(weight, block, scale, zero, torch.int8), scale

    def decode(self, data: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        from torchao.quantization.quant_primitives import dequantize_affine

        return dequantize_affine(data, _block(data), scale, None, torch.int8, output_dtype=dtype)


class Fp8PerChannel:
    """fp8 e4m3 with one scale per expert and output channel (amax / 448)."""

    storage_dtype = torch.float8_e4m3fn

    def encode(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        top = torch.finfo(torch.float8_e4m3fn).max
        scale = (weight.abs().amax(dim=-1, keepdim=True) / top).clamp(min=1e-12).float()
        return (weight / scale).clamp(-top, top).to(torch.float8_e4m3fn), scale.squeeze(-1)

    def decode(self, data: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return (data.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)


class QuantizationReport(BaseModel):
    method: QuantMethod
    params_total: int = Field(description="Parameters of the model (elements).")
    params_quantized: int = Field(description="Elements stored quantised (Linear weights and experts).")
    linear_weights: int = Field(description="nn.Linear weights converted by torchao.")
    expert_tensors: int = Field(description="Fused 3-D expert weights quantised per expert.")
    bytes_before: int
    bytes_after: int
    notes: list[str] = Field(default=[])

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def fraction_quantized(self) -> float:
        return self.params_quantized / self.params_total if self.params_total else 0.0

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def size_ratio(self) -> float:
        return self.bytes_after / self.bytes_before


def state_dict_bytes(model: torch.nn.Module) -> int:
    """Storage of the weights as serialised (quantised tensors count their real bytes)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def _quantized_experts_class(base: type[torch.nn.Module], codec: ExpertCodec) -> type[torch.nn.Module]:
    """`base` whose fused expert weights are read from quantised buffers, dequantised on each access."""

    def weight(name: str) -> property:
        def get(self: torch.nn.Module) -> torch.Tensor:
            dtype: torch.dtype = self.__dict__["_compute_dtype"]
            return codec.decode(getattr(self, f"{name}_q"), getattr(self, f"{name}_scale"), dtype)

        return property(get)

    return type(f"Quantized{base.__name__}", (base,), {n: weight(n) for n in _EXPERT_WEIGHTS})


def _quantize_experts(model: torch.nn.Module, codec: ExpertCodec) -> tuple[int, int]:
    """Quantise every fused 3-D expert weight in place: (tensors, elements)."""
    tensors = elements = 0
    classes: dict[type, type] = {}
    for module in model.modules():
        params = {n: p for n, p in module.named_parameters(recurse=False) if n in _EXPERT_WEIGHTS and p.dim() == 3}
        if not params:
            continue
        module.__dict__["_compute_dtype"] = next(iter(params.values())).dtype
        for name, param in params.items():
            data, scale = codec.encode(param.detach())
            del module._parameters[name]
            module.register_buffer(f"{name}_q", data)
            module.register_buffer(f"{name}_scale", scale)
            tensors, elements = tensors + 1, elements + param.numel()
        base = type(module)
        module.__class__ = classes.setdefault(base, _quantized_experts_class(base, codec))
    return tensors, elements


def _quantize_linears(model: torch.nn.Module, method: QuantMethod) -> tuple[int, int]:
    """torchao's weight-only quantisation of every nn.Linear: (weights, elements)."""
    from torchao.quantization import Float8WeightOnlyConfig, Int8WeightOnlyConfig, quantize_
    from torchao.utils import TorchAOBaseTensor

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    quantize_(model, Int8WeightOnlyConfig() if method == "int8-weight" else Float8WeightOnlyConfig())
    converted = [m for m in linears if isinstance(m.weight, TorchAOBaseTensor)]
    return len(converted), sum(m.weight.numel() for m in converted)


def quantize_model(
    model: torch.nn.Module, method: QuantMethod, expert_codec: ExpertCodec | None = None
) -> QuantizationReport:
    """Quantise `model` in place (Linear weights by torchao, fused experts by `expert_codec`, default
    the method's per-channel codec) and report what was covered and the storage before and after."""
    total = sum(p.numel() for p in model.parameters())
    before = state_dict_bytes(model)
    codec = expert_codec or (Int8PerChannel() if method == "int8-weight" else Fp8PerChannel())
    with torch.no_grad():
        tensors, expert_elements = _quantize_experts(model, codec)
        linears, linear_elements = _quantize_linears(model, method)
    notes = []
    if tensors:
        notes.append(
            f"{tensors} fused 3-D expert weights ({expert_elements:,} elements) quantised per expert and output "
            "channel with torchao's affine primitives: torchao's quantize_ converts only nn.Linear"
        )
    if method == "fp8":
        notes.append("fp8 weight-only on the CPU saves storage only: weights are upcast before each matmul")
    return QuantizationReport(
        method=method,
        params_total=total,
        params_quantized=expert_elements + linear_elements,
        linear_weights=linears,
        expert_tensors=tensors,
        bytes_before=before,
        bytes_after=state_dict_bytes(model),
        notes=notes,
    )
