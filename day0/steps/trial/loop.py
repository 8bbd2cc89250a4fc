"""The per-worker training loop, run by Ray Train's TorchTrainer (or bare, for the benchmark).

Read top to bottom: config -> model -> parallelism (DDP or FSDP2, activation checkpointing) ->
optimizer -> resume -> steps (forward, loss, backward, clip, step) -> checkpoints -> history.
The loss, clipping and AdamW come from `day0.core.training`, which step 1 captures the same way.

Determinism: the model comes from `seed`, the batch of step s from `data.batch_for_step`, one CPU
thread per worker; so a run resumed from step K repeats exactly the steps an uninterrupted run took.
Rank 0's return value is the full loss history (restored from the checkpoint, then extended).
`LoopHooks` are the loop's only extension points (no-ops by default; tests inject faults with them).

Platform kernels: with `platform` set (and a kernel table or an operator library read from the
vendor's packages to emulate), every aten call of the forward, backward, clipping and optimizer
step runs through the platform's dispatch mode (`day0.platforms.kernels.PlatformMode`): its
vendor/plugin kernels and step 2's adaptations (`adaptations`, rebuilt by `day0.platforms.adapted`),
exactly as step 2 ran them; each step's record counts the calls per kernel source. Without it the stock kernels run.
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import BaseModel, Field, JsonValue

from day0.core.dtypes import DTYPES
from day0.core.library_logs import quiet_known_library_logs
from day0.core.recompute import Recompute
from day0.core.training import GRAD_CLIP_NORM, WEIGHT_DECAY, clip_gradients, forward_loss, make_optimizer
from day0.core.typing import HFConfigDict
from day0.platforms.adapted import AdaptedKernel, apply_adaptations
from day0.platforms.kernels import Platform, PlatformMode, load_vendor_plugin
from day0.spec.cluster import PlatformSpec
from day0.steps.trial.data import batch_for_step
from day0.steps.trial.memory import SavedActivations, TrainingState, state_bytes
from day0.steps.trial.model import build_trial_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "LoopConfig",
    "LoopHooks",
    "LoopStep",
    "ProgressCadence",
    "lr_at",
    "platform_mode",
    "run_steps",
    "train_loop",
]

TrainDtype = Literal["fp32", "bf16", "fp16"]  # what the loop trains at (autocast below fp32)
_CPU = torch.device("cpu")
_EXTRA_KEYS = ("tokens", "event_log", "hooks")  # train_loop's config entries that are not LoopConfig fields


class LoopHooks:
    """Points where a caller may observe or alter a step; the defaults change nothing.

    The loop sets none itself: fault drills (`faults.TrialFaults`) use them to inject training bugs.
    A hooks object travels to the Ray Train workers with the loop, so it must pickle.
    """

    def describe(self) -> str:
        """One line for the trial result's notes."""
        return type(self).__name__

    def before_step(self, step: int, resumed_from: int) -> None:
        """Called first in 0-based `step` by an attempt that started at `resumed_from`."""

    def learning_rate(self, step: int, lr: float) -> float:
        return lr

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """The micro-batch loss about to be back-propagated."""
        return loss

    def apply_update(self, step: int) -> bool:
        """Whether the optimizer step is taken."""
        return True

    def after_step(self, step: int) -> None:
        """Called once the step's update is done, before its record and checkpoint."""


class LoopStep(BaseModel):
    step: int = Field(description="1-based step number.")
    loss: float
    grad_norm: float
    lr: float
    tokens: int = Field(description="Tokens in this step's global batch.")
    step_time_s: float = Field(description="Wall time from the end of the previous step (includes checkpoints).")
    compute_time_s: float = Field(description="Forward + backward + optimizer time.")
    kernel_calls: dict[str, int] = Field(
        default={},
        description="Op calls per kernel source (stock, vendor, plugin:x, adapt:y) in this step.",
    )


class LoopConfig(BaseModel):
    model_config_dict: HFConfigDict = Field(description="The scaled HF config (model.scale_config).")
    seed: int = 0
    steps: int = Field(ge=1)
    global_batch: int = Field(ge=1, description="Sequences per optimizer step, across all workers.")
    micro_batch: int = Field(ge=1, description="Sequences per forward/backward per worker.")
    seq_len: int = Field(ge=2)
    learning_rate: float = Field(gt=0)
    lr_warmup_steps: int = Field(0, ge=0, description="Linear warm-up from lr/steps to lr.")
    weight_decay: float = WEIGHT_DECAY
    grad_clip: float = GRAD_CLIP_NORM
    checkpoint_every: int = Field(ge=1)
    compute_dtype: TrainDtype = "fp32"
    recompute: Recompute = "none"
    sharding: Literal["ddp", "fsdp"] = "ddp"
    device_type: str = "cpu"
    experts_implementation: str | None = None
    num_threads: int = 1
    platform: PlatformSpec | None = Field(None, description="Train under this platform's kernel table (None: stock).")
    adaptations: list[AdaptedKernel] = Field(default=[], description="Step 2's adapted kernels, applied.")
    progress_every_s: float = Field(
        10.0, gt=0, description="Rank 0 says its progress at most this long after it last did (and at the ends)..."
    )
    progress_every_steps: int | None = Field(
        None, ge=1, description="...or after this many steps, whichever comes first (None: a tenth of the steps)."
    )


class ProgressCadence:
    """When rank 0 says its progress: at the first and last step, and then every `every_s` seconds or
    `every_steps` steps, whichever comes first. Each line carries the throughput since the line before
    and the ETA at the mean step time of this attempt."""

    def __init__(self, cfg: LoopConfig, start: int, now: float) -> None:
        self.steps, self.start, self.began = cfg.steps, start, now
        self.every_s, self.every_steps = cfg.progress_every_s, cfg.progress_every_steps or max(1, cfg.steps // 10)
        self.tokens_per_step = cfg.global_batch * cfg.seq_len
        self.last_step, self.last_time = start, now

    def due(self, step: int, now: float) -> dict[str, float | int] | None:
        """The progress fields for 1-based `step` finished at `now`, or None when it is not time yet."""
        first, last = step == self.start + 1, step == self.steps
        if not (first or last or step - self.last_step >= self.every_steps or now - self.last_time >= self.every_s):
            return None
        tokens_per_s = (step - self.last_step) * self.tokens_per_step / max(now - self.last_time, 1e-9)
        eta_s = (now - self.began) / (step - self.start) * (self.steps - step)
        self.last_step, self.last_time = step, now
        return {"step": step, "steps": self.steps, "tokens_per_s": tokens_per_s, "eta_s": eta_s}


def platform_mode(cfg: LoopConfig) -> tuple[PlatformMode | None, list[str]]:
    """The dispatch mode the loop trains under (None: stock kernels) and notes on what it could not
    rebuild. A platform with nothing to emulate (probed library, no kernels) needs no mode."""
    if cfg.platform is None:
        return None, []
    platform = Platform.from_spec(cfg.platform)
    notes = platform.notes + apply_adaptations(platform, cfg.adaptations)
    if platform.library is None and not platform.kernels.ops():
        return None, notes
    return platform.mode(), notes


def lr_at(step: int, cfg: LoopConfig) -> float:
    """Learning rate of 0-based `step`: linear warm-up, then constant (a pure function of the step)."""
    if cfg.lr_warmup_steps and step < cfg.lr_warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.lr_warmup_steps
    return cfg.learning_rate


def _peak_memory_bytes(device: torch.device) -> int:
    """The device's allocator peak (torch.cuda's, or the device module a vendor plugin registers,
    torch.npu ...); the process's peak RSS for the host, or a device module without memory stats."""
    module = getattr(torch, device.type, None) if device.type != "cpu" else None
    if module is not None and hasattr(module, "max_memory_allocated"):
        return int(module.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def _parallelize(model: PreTrainedModel, cfg: LoopConfig, world: int, device: torch.device) -> torch.nn.Module:
    """Apply step 4's choices: activation checkpointing, then DDP or FSDP2 (per decoder layer + root)."""
    if cfg.recompute != "none":  # full: every decoder layer; selective: every other layer
        model.activation_checkpointing_enable(
            {"use_reentrant": False}, every_n_layers=1 if cfg.recompute == "full" else 2
        )
    if world == 1:
        return model
    if cfg.sharding == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)  # in place: the same module, its class swapped to an FSDPModule subclass
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def _state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer, distributed: bool):
    if not distributed:
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _load_state(model, optimizer, directory: Path, distributed: bool) -> list[dict[str, JsonValue]]:
    model_sd = torch.load(directory / "model.pt", weights_only=True)
    optim_sd = torch.load(directory / "optimizer.pt", weights_only=True)
    if distributed:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            model,
            optimizer,
            model_state_dict=model_sd,
            optim_state_dict=optim_sd,
            options=StateDictOptions(full_state_dict=True),
        )
    else:
        model.load_state_dict(model_sd)
        optimizer.load_state_dict(optim_sd)
    return json.loads((directory / "history.json").read_text())


def _save_state(directory: Path, model_sd, optim_sd, history: list[dict[str, JsonValue]]) -> None:
    torch.save(model_sd, directory / "model.pt")
    torch.save(optim_sd, directory / "optimizer.pt")
    (directory / "history.json").write_text(json.dumps(history))


def _import_model_code(config: HFConfigDict) -> None:
    """Build the model once on the meta device so its modelling code is imported (no memory)."""
    from transformers import AutoModelForCausalLM

    from day0.steps.trial.model import _hf_config

    with torch.device("meta"):
        AutoModelForCausalLM.from_config(_hf_config(config))


def _grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    norm = clip_gradients(model.parameters(), max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def _device(cfg: LoopConfig, local_rank: int) -> torch.device:
    """This worker's device: Ray Train's GPU for cuda; for another accelerator (npu, musa ...) the
    vendor plugin is loaded first (it registers the device type with torch), then its local index."""
    if cfg.device_type == "cpu":
        return _CPU
    if cfg.device_type == "cuda":
        import ray.train.torch

        return ray.train.torch.get_device()
    if cfg.platform is not None and cfg.platform.vendor_plugin:
        load_vendor_plugin(cfg.platform)
    return torch.device(cfg.device_type, local_rank)


# Any: Ray Train's one config dict: LoopConfig's fields as data, a tensor, an actor handle, hooks
def train_loop(config: dict[str, Any]) -> list[dict[str, JsonValue]]:
    """Ray Train's per-worker function. `config`: LoopConfig fields + `tokens` (1-D int tensor)
    + optional `event_log` (an EventLog actor handle) and `hooks` (LoopHooks). Returns rank 0's
    history (LoopStep dicts)."""
    import ray.train

    quiet_known_library_logs()  # no library progress bar in a worker's log: the loop says its own progress
    tokens, events, hooks = config["tokens"], config.get("event_log"), config.get("hooks")
    cfg = LoopConfig.model_validate({k: v for k, v in config.items() if k not in _EXTRA_KEYS})
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    node = ray.get_runtime_context().get_node_id()
    log = (
        (lambda kind, **kw: events.record.remote(kind, rank=rank, node_id=node, **kw))
        if events
        else (lambda kind, **kw: None)
    )
    return run_steps(
        cfg,
        tokens,
        rank=rank,
        world=world,
        distributed=torch.distributed.is_initialized(),
        device=_device(cfg, ctx.get_local_rank()),
        checkpoint=ray.train.get_checkpoint(),
        report=ray.train.report,
        log=log,
        hooks=hooks,
    )


def run_steps(
    cfg: LoopConfig,
    tokens: torch.Tensor,
    *,
    rank: int = 0,
    world: int = 1,
    distributed: bool = False,
    device: torch.device = _CPU,
    checkpoint=None,
    report=None,
    log=lambda kind, **kw: None,
    hooks: LoopHooks | None = None,
) -> list[dict[str, JsonValue]]:
    """The loop itself; `report`/`checkpoint` are Ray Train's (None when run bare by the benchmark)."""
    hooks = hooks or LoopHooks()
    torch.set_num_threads(cfg.num_threads)
    tokens = torch.as_tensor(tokens)
    _import_model_code(cfg.model_config_dict)
    baseline_mem = _peak_memory_bytes(device)  # after imports: the rest is the model, optimizer, activations
    if cfg.global_batch % (cfg.micro_batch * world):
        raise ValueError(
            f"global batch {cfg.global_batch} is not a multiple of micro_batch {cfg.micro_batch} x workers {world}"
        )
    accum = cfg.global_batch // (cfg.micro_batch * world)
    mode, _ = platform_mode(cfg)
    kernels = mode if mode is not None else contextlib.nullcontext()

    built = build_trial_model(
        cfg.model_config_dict, seed=cfg.seed, experts_implementation=cfg.experts_implementation, device=device
    )
    built.train()
    model = _parallelize(built, cfg, world, device)
    optimizer = make_optimizer(model.parameters(), cfg.learning_rate, cfg.weight_decay)
    activations = SavedActivations(model)  # counted on the first step run (every step has the same shapes)
    counted: TrainingState | None = None

    history: list[dict[str, JsonValue]] = []
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            history = _load_state(model, optimizer, Path(d), distributed)
    start = len(history)
    log("started", from_step=start)

    last = time.perf_counter()
    cadence = ProgressCadence(cfg, start, last)
    for step in range(start, cfg.steps):
        hooks.before_step(step, start)
        t0 = time.perf_counter()
        served_before = dict(mode.served) if mode is not None else {}
        lr = hooks.learning_rate(step, lr_at(step, cfg))
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = batch_for_step(tokens, step, cfg.global_batch, cfg.seq_len, cfg.seed)
        mine = batch[rank * accum * cfg.micro_batch : (rank + 1) * accum * cfg.micro_batch].to(device)
        loss_sum = torch.zeros((), device=device)
        for i in range(accum):
            micro = mine[i * cfg.micro_batch : (i + 1) * cfg.micro_batch]
            sync = i == accum - 1
            no_sync = getattr(model, "no_sync", None)  # DDP all-reduces on the last micro-batch only
            with no_sync() if (not sync and no_sync) else contextlib.nullcontext(), kernels:
                with activations.recording() if step == start else contextlib.nullcontext():
                    loss = forward_loss(model, micro, DTYPES[cfg.compute_dtype])
                loss = hooks.loss(step, loss) / accum
                loss.backward()
            loss_sum += loss.detach()
        with kernels:
            grad_norm = _grad_norm(model, cfg.grad_clip)
            if hooks.apply_update(step):
                optimizer.step()
        if step == start:
            params, grads, states = state_bytes(model, optimizer)
            counted = TrainingState(
                parameters=params, gradients=grads, optimizer_states=states, activations=activations.bytes
            )
        optimizer.zero_grad(set_to_none=True)
        if distributed and world > 1:
            torch.distributed.all_reduce(loss_sum)
            loss_sum /= world
        hooks.after_step(step)
        now = time.perf_counter()
        history.append(
            LoopStep(
                step=step + 1,
                loss=float(loss_sum),
                grad_norm=grad_norm,
                lr=lr,
                tokens=cfg.global_batch * cfg.seq_len,
                step_time_s=now - last,
                compute_time_s=now - t0,
                kernel_calls=_calls_since(served_before, mode),
            ).model_dump()
        )
        if step == start:
            log("first_step", step=step + 1)
        if rank == 0 and (said := cadence.due(step + 1, now)) is not None:
            log("progress", loss=history[-1]["loss"], **said)
        if report is not None and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            _checkpoint(model, optimizer, history, distributed, rank, report)
        last = time.perf_counter()

    log(
        "memory",
        peak_bytes=_peak_memory_bytes(device),
        baseline_bytes=baseline_mem,
        tensor_bytes=counted.total if counted else None,
    )
    log("finished", step=len(history))
    return history


def _calls_since(before: dict[tuple[str, str], int], mode: PlatformMode | None) -> dict[str, int]:
    """aten calls per kernel source since `before` (a copy of `mode.served`)."""
    out: dict[str, int] = {}
    for (op, source), n in (mode.served if mode is not None else {}).items():
        if n > before.get((op, source), 0):
            out[source] = out.get(source, 0) + n - before.get((op, source), 0)
    return out


def _checkpoint(model, optimizer, history, distributed: bool, rank: int, report) -> None:
    """Every rank joins (FSDP gathers full state); rank 0 writes and hands the directory to Ray Train."""
    from ray.train import Checkpoint

    model_sd, optim_sd = _state_dicts(model, optimizer, distributed)
    step = len(history)
    metrics = {"step": step, "loss": history[-1]["loss"]}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            _save_state(Path(tmp), model_sd, optim_sd, history)
            checkpoint = Checkpoint.from_directory(tmp)
        report(metrics, checkpoint=checkpoint, checkpoint_dir_name=f"step_{step:06d}")
