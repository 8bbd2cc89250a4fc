"""What every reader records of the wheel it reads: the file's provenance and the torch it pairs with."""

from __future__ import annotations

import hashlib
import re

from day0.platforms.libraries.model import LibraryFile
from day0.platforms.wheels import Wheel

__all__ = ["file_of", "torch_pin"]

_TORCH_PIN = re.compile(r"^torch\s*==\s*([0-9][0-9A-Za-z.]*?)(?:\.\*)?\s*$")


def file_of(wheel: Wheel, member: str, content: bytes) -> LibraryFile:
    return LibraryFile(
        package=wheel.package,
        version=wheel.version,
        file=member,
        wheel=wheel.path.name,
        wheel_sha256=wheel.sha256,
        file_sha256=hashlib.sha256(content).hexdigest(),
    )


def torch_pin(wheel: Wheel) -> str | None:
    """The torch version an unconditional `Requires-Dist: torch==X.*` pins, e.g. '2.14.0'."""
    for requirement in wheel.requires():
        found = _TORCH_PIN.match(requirement.split(";")[0]) if ";" not in requirement else None
        if found:
            return found.group(1)
    return None
