"""The known harmless library log records are dropped, and only those."""

from __future__ import annotations

import enum
import logging

import pytest

from day0.core.library_logs import quiet_known_library_logs

_DEPRECATION = (
    "%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type. "
    "Calling register_constant() on Enum subclasses is deprecated and will be an error in a future release."
)


def _enum(module: str) -> type[enum.Enum]:
    kind = enum.Enum("KernelPreference", "AUTO")
    kind.__module__ = module
    return kind


def test_only_torchaos_enum_registration_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    quiet_known_library_logs()
    quiet_known_library_logs()  # idempotent: one filter
    logger = logging.getLogger("torch.utils._pytree")
    assert len(logger.filters) == len({id(f) for f in logger.filters})
    with caplog.at_level(logging.WARNING, logger="torch.utils._pytree"):
        logger.warning(_DEPRECATION, _enum("torchao.utils"))
        logger.warning(_DEPRECATION, _enum("someone.else"))
        logger.warning("another message from %s", "torch")
    assert [r.getMessage()[:40] for r in caplog.records] == [
        "<enum 'KernelPreference'> is an Enum sub",
        "another message from torch",
    ]
