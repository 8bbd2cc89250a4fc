"""Known harmless log records from libraries, dropped by name so that a command prints only its own output,
and the libraries' progress bars, switched off at their source.

    from day0.core.library_logs import quiet_known_library_logs
    quiet_known_library_logs()   # before transformers' modeling code or torchao is imported; idempotent

Each filter drops one message from one library's logger and nothing else; the reason sits beside it.

- torchao 0.18 (the newest release, the version the project pins) registers two of its enums
  (`KernelPreference`, `ScaleCalculationMode`) as pytree constants when imported; torch 2.15 logs a
  deprecation warning for each (`torch.utils._pytree`: enums are now opaque values and need no
  registration; torch still allows the call). transformers imports torchao with its modeling code
  whenever torchao is installed (its quantizer registry), so every `day0 analyze`, and every step that
  builds a model, printed both lines. Nothing day0 does depends on the registration; a torchao release
  that drops it makes the filter a no-op.

Progress bars (issue 42: transformers' "Writing model shards" and safetensors' loading bars in the
trial's and the serving step's logs, where a bar is one line per redraw; the trial says its own
progress): tqdm reads `TQDM_DISABLE`, huggingface_hub and transformers `HF_HUB_DISABLE_PROGRESS_BARS`
when imported, and each is told directly when imported already. Set in this process's environment,
they reach what it starts (a vLLM engine, Ray's workers on a private local Ray) too.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["quiet_known_library_logs"]


class _TorchaoEnumConstant(logging.Filter):
    """Drops torch's "is an Enum subclass ... register_constant() ... deprecated" record for torchao's enums."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("%s is an Enum subclass") or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not str(getattr(args[0], "__module__", "")).startswith("torchao")


_FILTERS: dict[str, logging.Filter] = {"torch.utils._pytree": _TorchaoEnumConstant()}


_NO_PROGRESS_BARS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def quiet_known_library_logs() -> None:
    """Attach each filter to its library's logger (once), and switch the libraries' progress bars off."""
    for name, known in _FILTERS.items():
        logger = logging.getLogger(name)
        if known not in logger.filters:
            logger.addFilter(known)
    for variable, value in _NO_PROGRESS_BARS.items():
        os.environ.setdefault(variable, value)  # one the user set stays theirs
    if (hub := sys.modules.get("huggingface_hub.utils")) is not None:
        hub.disable_progress_bars()
    if (transformers_logging := sys.modules.get("transformers.utils.logging")) is not None:
        transformers_logging.disable_progress_bar()
