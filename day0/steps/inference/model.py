"""The served model: built from plain values (a scaled HF config, a seed, an optional trained
checkpoint, a tokenizer in the store) so this package never reaches into another step's code, and
written as a normal model directory that an engine loads (`config.json`, safetensors, tokenizer).

Why a directory: engines (`transformers serve`, vLLM, SGLang) load models from one. A quantised
model is written with its quantised values dequantised to the serving dtype: the engine then serves
exactly the numerics whose quality was measured, while the storage saving is measured in-process
(`transformers serve` loads no checkpoint quantised per expert).

Held-out text for quality checks: the docstrings of standard-library modules, which ship with
CPython (offline) and are not part of the trial's training text (`pydoc_data.topics`).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, Field

from day0.core.library_logs import quiet_known_library_logs
from day0.core.typing import HFConfigDict
from day0.errors import UsageError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "HELD_OUT_MODULES",
    "MAX_SERVED_PARAMS",
    "ServedModel",
    "build_served_model",
    "held_out_text",
    "load_tokenizer",
    "write_model_dir",
]

quiet_known_library_logs()  # before torchao is imported (here or by transformers)

HELD_OUT_MODULES = (
    "argparse", "asyncio", "bisect", "collections", "contextlib", "csv", "dataclasses", "decimal", "email",
    "fractions", "functools", "heapq", "http.client", "itertools", "json", "logging", "pathlib", "re", "shutil",
    "sqlite3", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap", "typing", "unittest",
    "urllib.request", "zipfile",
)  # fmt: skip

MAX_SERVED_PARAMS = 2_000_000_000  # built in fp32 on the host: larger means trial.scale was forgotten


class ServedModel(BaseModel):
    """What to serve, as plain data (it travels in a job request)."""

    label: str = Field(description="What it is, for the report (e.g. 'trial checkpoint of tiny-qwen3-moe').")
    config: HFConfigDict = Field(description="The HF config.json of the (scaled-down) model.")
    tokenizer: str = Field(
        description="A saved HF tokenizer whose vocabulary matches config.vocab_size: the store URL of its folder "
        "(s3://..., file://...; what a run sends, since a cluster's pods cannot see the flow's disk) or a directory."
    )
    seed: int = Field(0, description="Initial weights' seed (the trial's), used when there is no checkpoint.")
    checkpoint: str | None = Field(
        None, description="Directory or store URI holding the trained `model.pt` state dict (step 5's)."
    )


def held_out_text() -> str:
    return "\n\n".join(importlib.import_module(m).__doc__ or "" for m in HELD_OUT_MODULES)


def load_tokenizer(location: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer saved at `location`: a directory, or a store folder URL (its files are fetched)."""

    where = str(location)
    if "://" not in where:
        return _load_tokenizer_dir(Path(where), where)
    from day0.store import open_store

    store = open_store(where)
    with tempfile.TemporaryDirectory(prefix="day0-tokenizer-") as tmp:
        for name in store.list():
            if "/" not in name:
                (Path(tmp) / name).write_bytes(store.get_bytes(name))
        return _load_tokenizer_dir(Path(tmp), where)


def _load_tokenizer_dir(directory: Path, where: str) -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    if not (directory / "tokenizer.json").is_file():
        raise UsageError(f"served model: no tokenizer.json in {where}")
    return PreTrainedTokenizerFast.from_pretrained(directory)


def _checkpoint_state(uri: str) -> dict[str, torch.Tensor]:
    import io

    if "://" in uri and not uri.startswith("file://"):
        from day0.store import open_store

        data = open_store(uri).get_bytes("model.pt")
        return torch.load(io.BytesIO(data), weights_only=True)
    path = Path(uri.removeprefix("file://")) / "model.pt"
    if not path.is_file():
        raise UsageError(f"served model: checkpoint {uri!r} has no model.pt")
    return torch.load(path, weights_only=True)


def build_served_model(served: ServedModel) -> PreTrainedModel:
    """The causal LM in fp32: the checkpoint's weights if given, else initialised from `served.seed`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**served.config)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    if params > MAX_SERVED_PARAMS:
        raise UsageError(
            f"trial.scale: the served model would have {params / 1e9:.1f}B parameters (> "
            f"{MAX_SERVED_PARAMS / 1e9:.0f}B on this host); set trial.scale {{layers, hidden, experts}} "
            "to scale it down"
        )
    torch.manual_seed(served.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if served.checkpoint:
        model.load_state_dict(_checkpoint_state(served.checkpoint))
    return model.eval()


def _dequantized(module: torch.nn.Module, name: str) -> torch.Tensor:
    """The weight's values in its compute dtype: torchao tensors dequantised, quantised experts decoded."""
    from torchao.utils import TorchAOBaseTensor

    value = getattr(module, name)
    return value.dequantize() if isinstance(value, TorchAOBaseTensor) else value


def write_model_dir(model: torch.nn.Module, served: ServedModel, directory: Path) -> Path:
    """Write `model` (quantised or not) as an engine-loadable directory with the tokenizer beside it."""
    plain = build_served_model(served.model_copy(update={"checkpoint": None}))
    with torch.no_grad():
        for name, param in plain.named_parameters():
            owner, _, attr = name.rpartition(".")
            param.copy_(_dequantized(model.get_submodule(owner), attr))
    plain.config.use_cache = True
    if directory.exists():
        shutil.rmtree(directory)
    plain.save_pretrained(directory)
    load_tokenizer(served.tokenizer).save_pretrained(directory)
    return directory
