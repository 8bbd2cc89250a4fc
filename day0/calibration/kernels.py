"""The microbenchmark kernels, run inside Ray workers (torch is imported here, on the worker).

Each returns plain numbers (seconds per repeat); `Worker` is the Ray actor that owns one accelerator
(or one CPU) and, for collectives, its rank of a torch.distributed group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed import TCPStore

__all__ = ["Worker"]


def _device_name(torch: object, device: object) -> str:
    """The device's own name (an accelerator's module says it); a CPU's from /proc/cpuinfo."""
    kind = getattr(device, "type", "cpu")
    module = getattr(torch, kind, None) if kind != "cpu" else None
    if module is not None and hasattr(module, "get_device_name"):
        return f"{kind}: {module.get_device_name(device)}"
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    except OSError:
        names = []
    import platform

    return f"cpu: {names[0] if names else platform.processor() or platform.machine()}"


class Worker:
    def __init__(self, device_type: str) -> None:
        import torch

        self.torch = torch
        self.store: TCPStore | None = None  # rank 0's rendezvous, while the group lives
        self.device = torch.device("cpu") if device_type == "cpu" else torch.device(device_type, 0)
        if device_type == "cpu":
            torch.set_num_threads(1)  # one worker, one core: what a Ray CPU "accelerator" is

    def where(self) -> tuple[str, str]:
        """(this worker's host, the name of the device it measures on)."""
        import socket

        return socket.gethostname(), _device_name(self.torch, self.device)

    def _sync(self) -> None:
        """Wait for the device's queued work: torch.cuda's, or the device module a vendor plugin registers."""
        module = getattr(self.torch, self.device.type, None) if self.device.type != "cpu" else None
        if module is not None and hasattr(module, "synchronize"):
            module.synchronize()

    def _time(self, fn: Callable[[], object], repeats: int) -> list[float]:
        fn()  # warm-up (kernel selection, allocation)
        self._sync()
        out = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            self._sync()
            out.append(time.perf_counter() - t)
        return out

    def gemm(self, dtype: str, m: int, n: int, k: int, repeats: int) -> tuple[list[float], int, int] | None:
        """Seconds per GEMM pass of shape (m x k) @ (k x n) at `dtype` as training runs it, the aten ops
        dispatched and the GEMMs done; None where the device has no such GEMM. fp32 and 16-bit: a
        `Linear(k, n)` forward and backward (input and weight gradients: 3 GEMMs of the shape, the
        last two on transposed operands) on fp32 weights under autocast, like the trial's layers, so
        the casts and layouts a step meets are in the figure. fp8: one `_scaled_mm` forward."""
        torch = self.torch
        if dtype == "fp8":
            if self.device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
                return None
            a = torch.randn(m, k, device=self.device).to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device=self.device).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=self.device)
            try:
                return self._time(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), repeats), 1, 1
            except RuntimeError:
                return None
        from day0.core.dtypes import DTYPES
        from day0.platforms.kernels import Platform

        t = DTYPES[dtype]
        linear = torch.nn.Linear(k, n, bias=False, device=self.device)
        x = torch.randn(m, k, device=self.device, requires_grad=True)

        def step() -> None:
            with torch.autocast(self.device.type, dtype=t, enabled=t != torch.float32):
                y = linear(x)
            y.backward(torch.ones_like(y))

        step()  # the gradients exist from here on: later passes accumulate into them, as training does
        counter = Platform("host").mode()
        with counter:
            step()
        return self._time(step, repeats), sum(counter.served.values()), 3

    def dispatch(self, steps: int, repeats: int) -> tuple[list[float], int]:
        """Seconds per `steps` training passes (forward, the trial's loss, backward through autograd:
        `day0.core.training.forward_loss`) of a tiny Hugging Face causal LM (Llama, hidden 16, 2 layers,
        8 tokens: built from its config, no weights fetched), and the aten ops one pass dispatches
        (counted once under a probe platform's dispatch mode). The operands are so small that the time is the ops'
        fixed host cost as eager training pays it: dispatcher, autograd and the modules' Python between
        ops (a bare chain of `nn.Linear` pays about half of it per op)."""
        import warnings

        from transformers import AutoModelForCausalLM, LlamaConfig

        from day0.core.training import forward_loss
        from day0.platforms.kernels import Platform

        torch = self.torch
        cfg = LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=32,
            max_position_embeddings=16,
            use_cache=False,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_config(cfg).to(self.device).train()
        ids = torch.randint(0, 32, (1, 9), device=self.device)

        def one() -> None:
            forward_loss(model, ids, torch.float32).backward()

        counter = Platform("host").mode()  # a platform with every stock kernel: counts each aten call
        with counter:
            one()

        def many() -> None:
            for _ in range(steps):
                one()

        return self._time(many, repeats), sum(counter.served.values())

    def optimizer(self, tensors: int, params: int, repeats: int) -> list[float]:
        """Seconds per optimizer step of the trial's recipe (`day0.core.training`: foreach clipping,
        then foreach AdamW) over `tensors` fp32 parameter tensors holding `params` elements in all.
        Where a device has no multi-tensor kernels (the CPU) each foreach call loops over the tensors,
        so the step costs per tensor as well as per element."""
        from day0.core.training import clip_gradients, make_optimizer

        torch = self.torch
        size = max(1, params // tensors)
        weights = [torch.nn.Parameter(torch.randn(size, device=self.device) * 0.02) for _ in range(tensors)]
        for w in weights:
            w.grad = torch.randn_like(w) * 1e-3
        optimizer = make_optimizer(weights, 3e-4)

        def step() -> None:
            clip_gradients(weights)
            optimizer.step()

        return self._time(step, repeats)

    def copy(self, nbytes: int, repeats: int) -> list[float]:
        src = self.torch.empty(nbytes // 4, dtype=self.torch.float32, device=self.device).uniform_()
        dst = self.torch.empty_like(src)
        return self._time(lambda: dst.copy_(src), repeats)

    def host_store(self, world: int, timeout_s: float) -> tuple[str, int]:
        """Open the group's rendezvous (a TCPStore) on this worker, rank 0, at a port the OS picks:
        a port chosen elsewhere and passed in can be taken before rank 0 binds it, and then the other
        ranks wait for a rendezvous that never opens."""
        from datetime import timedelta

        import ray
        import torch.distributed as dist

        host = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(host, 0, world, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        return host, int(self.store.port)

    def join(self, backend: str, host: str, port: int, rank: int, world: int, timeout_s: float) -> int:
        """Join the group whose store rank 0 hosts; every wait (rendezvous, collectives) ends after
        `timeout_s` with an error instead of hanging."""
        from datetime import timedelta

        import torch.distributed as dist

        timeout = timedelta(seconds=timeout_s)
        store = self.store if rank == 0 else dist.TCPStore(host, port, world, False, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        return rank

    def collective(self, op: str, nbytes: int, repeats: int) -> list[float]:
        """Seconds per `op` on a `nbytes` fp32 buffer per rank (all-gather: the gathered output)."""
        import torch.distributed as dist

        torch, world = self.torch, dist.get_world_size()
        n = max(world, nbytes // 4 // world * world)
        buf = torch.ones(n, dtype=torch.float32, device=self.device)
        if op == "all_reduce":
            fn = lambda: dist.all_reduce(buf)  # noqa: E731
        elif op == "all_gather":
            part = torch.ones(n // world, dtype=torch.float32, device=self.device)
            parts = list(buf.chunk(world))
            fn = lambda: dist.all_gather(parts, part)  # noqa: E731
        else:
            out = torch.empty_like(buf)
            fn = lambda: dist.all_to_all_single(out, buf)  # noqa: E731
        dist.barrier()
        return self._time(fn, repeats)

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.store = None
