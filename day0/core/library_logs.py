"""Known harmless log records from libraries, dropped by name so that a command prints only its own output.

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
"""

from __future__ import annotations

import logging

__all__ = ["quiet_known_library_logs"]


class _TorchaoEnumConstant(logging.Filter):
    """Drops torch's "is an Enum subclass ... register_constant() ... deprecated" record for torchao's enums."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("%s is an Enum subclass") or not record.args:
            return True
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return not str(getattr(args[0], "__module__", "")).startswith("torchao")


_FILTERS: dict[str, logging.Filter] = {"torch.utils._pytree": _TorchaoEnumConstant()}


def quiet_known_library_logs() -> None:
    """Attach each filter to its library's logger (once)."""
    for name, known in _FILTERS.items():
        logger = logging.getLogger(name)
        if known not in logger.filters:
            logger.addFilter(known)
