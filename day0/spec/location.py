"""Spec files named by flow parameters (a deployment run's `spec`, the regression's `watch` and the
specs it lists, the receiver's spec template): data, not a window onto the worker's files.

Contract: `spec_file(path, parameter)` returns the path, links resolved, only when it is a regular
`.yaml`/`.yml` file inside one of `DAY0_RUN_SPEC_ROOTS` (default: the repository's configs/) or the
folders the caller adds (the receiver: its watch file's own folder, as the chart mounts both); else a
`UsageError` naming the parameter and the path. `read_spec_document` reads such a file and reports
a file that is no spec without a word of its contents (a spec of `/etc/shadow` echoed its lines into
the flow run's state message and logs): its errors are counted, and `day0 validate` lists them.
"""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from day0.core.typing import Document
from day0.errors import SpecError, UsageError
from day0.settings import RunSettings
from day0.yamlio import read_user_yaml

__all__ = ["read_spec_document", "spec_file"]

T = TypeVar("T")
SUFFIXES = (".yaml", ".yml")


def spec_file(path: Path, parameter: str, also: Sequence[Path] = ()) -> Path:
    """`path` checked as the contract says; `also`: folders allowed besides DAY0_RUN_SPEC_ROOTS."""
    roots = [root.resolve() for root in (*RunSettings().spec_roots, *also)]
    resolved = path.resolve()
    if resolved.suffix not in SUFFIXES:
        raise UsageError(f"{parameter} {path}: expected a YAML spec file ({' or '.join(SUFFIXES)})")
    if not any(resolved.is_relative_to(root) for root in roots):
        where = ", ".join(map(str, roots))
        raise UsageError(f"{parameter} {path}: outside the folders specs may come from ({where}; DAY0_RUN_SPEC_ROOTS)")
    if not resolved.is_file():
        raise UsageError(f"{parameter} {path}: file not found (or not a regular file)")
    return resolved


def read_spec_document(path: Path, parameter: str, build: Callable[[Document], T], check: str = "day0 validate") -> T:
    """`build` over the YAML at `spec_file(path)`; its errors counted, never quoted (see the contract).
    `check`: the command that lists them."""
    checked = spec_file(path, parameter)
    try:
        return build(read_user_yaml(checked))
    except SpecError as exc:
        count = len(exc.issues)
    except ValidationError as exc:
        count = exc.error_count()
    raise UsageError(
        f"{parameter} {path}: not a valid spec ({count} error(s), not quoted here: a flow run's messages never "
        f"repeat a file's contents); `{check} {path}` lists them"
    ) from None
