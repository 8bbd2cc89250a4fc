"""Reading the YAML and JSON files a user hands day0 (specs, platforms, clusters, model configs), bounded.

Contract: `read_user_yaml(path)` returns the parsed document or raises `SpecError` naming the file:
missing, a directory, not a regular file (a FIFO, a device such as /dev/zero, a socket: refused
at once, before any read), larger than `DAY0_LIMITS_MAX_FILE_BYTES` (also a file that grows while
it is read: never more than the limit is read), not UTF-8, empty, not valid YAML, a mapping with a
duplicate key, aliases expanding past `DAY0_LIMITS_MAX_YAML_NODES` (an alias bomb is refused from
its node graph, before anything walks the expanded value), or nesting deeper than `MAX_DEPTH`.
`read_user_json(path)` reads a JSON file (a model's config.json) within the same limits, and raises
`ValueError` naming the file, for the caller to wrap in its own error. Messages never echo the
document's values beyond PyYAML's position marks. Parsing uses libyaml (`CSafeLoader`,
about ten times faster than the pure-Python loader on a spec) when PyYAML was built with it, and
`safe_dump` its emitter likewise.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Hashable
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

try:
    from yaml import CSafeDumper as _SafeDumper
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

from day0.core.typing import Document
from day0.errors import SpecError, SpecIssue
from day0.settings import LimitsSettings

__all__ = ["MAX_DEPTH", "read_user_json", "read_user_yaml", "safe_dump", "safe_load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
# Containers inside containers: a spec nests about 6 deep, a model config.json 3-4; past this it is
# not a config (and Python's recursion would give out on it, in the parser or in whatever walks it).
MAX_DEPTH = 64


class _BoundedLoader(_SafeLoader):
    """The safe loader, refusing duplicate mapping keys."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Document]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
                ident = (key_node.tag, key_node.value)
                if ident in seen:
                    mark = key_node.start_mark
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value[:80]!r} (line {mark.line + 1})", mark
                    )
                seen.add(ident)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: Node, limit: int) -> int:
    """Nodes the document has once every alias is expanded; stops counting past `limit`.
    Aliased nodes are the same object in the graph, so memoising by identity keeps this linear."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Node) -> int:
        ident = id(node)
        if ident in sizes:
            return sizes[ident]
        if ident in active:
            raise ValueError("a recursive alias (an anchor used inside itself)")
        active.add(ident)
        total = 1
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > limit:
                break
        active.discard(ident)
        sizes[ident] = total
        return total

    return size(root)


def _issue(path: Path, message: str) -> SpecError:
    return SpecError(str(path), [SpecIssue("", message)])


class _Refused(Exception):
    """A file refused before parsing; the message completes "<path> ..."."""


def _read_bytes(path: Path, limit: int, kind: str) -> str:
    """The UTF-8 text of the regular file at `path`, at most `limit` bytes, or `_Refused`."""
    too_big = f"the limit is {limit} (set DAY0_LIMITS_MAX_FILE_BYTES to raise it)"
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise _Refused(f"is a directory; expected a {kind} file")
        if not stat.S_ISREG(mode):
            raise _Refused(f"is not a regular file (a device, FIFO or socket); expected a {kind} file")
        # O_NONBLOCK: a file swapped for a FIFO after the check above fails the read, never blocks it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _Refused(f"is not a regular file (a device, FIFO or socket); expected a {kind} file")
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise _Refused(f"is {size} bytes; {too_big}")
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise _Refused("file not found") from None
    except OSError as exc:
        raise _Refused(f"cannot be read: {exc.strerror}") from None
    if len(data) > limit:
        raise _Refused(f"grew past {limit} bytes while read; {too_big}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _read_text(path: Path, limits: LimitsSettings) -> str:
    try:
        return _read_bytes(path, limits.max_file_bytes, "YAML")
    except _Refused as exc:
        raise _issue(path, str(exc)) from None


def _depth(node: Node, limit: int) -> int:
    """How deep containers nest under `node` (iteratively: no recursion to give out), up to `limit` + 1."""
    deepest, stack, seen = 0, [(node, 1)], set()
    while stack:
        current, depth = stack.pop()
        if id(current) in seen or not isinstance(current, SequenceNode | MappingNode):
            continue
        seen.add(id(current))
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = current.value if isinstance(current, SequenceNode) else [n for pair in current.value for n in pair]
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _json_depth(text: str, limit: int) -> int:
    """How deep brackets nest in JSON `text`, outside strings, up to `limit` + 1."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def read_user_json(path: Path, limits: LimitsSettings | None = None) -> Document:
    """The JSON document at `path`, read within `limits` and `MAX_DEPTH` (see the module contract);
    `ValueError("<path> ...")` names the file and what is wrong."""
    limits = limits or LimitsSettings()
    try:
        text = _read_bytes(path, limits.max_file_bytes, "JSON")
    except _Refused as exc:
        raise ValueError(f"{path} {exc}") from None
    if _json_depth(text, MAX_DEPTH) > MAX_DEPTH:
        raise ValueError(f"{path} nests deeper than {MAX_DEPTH} levels; expected a config")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is malformed JSON: {exc}") from None


def read_user_yaml(path: Path, limits: LimitsSettings | None = None) -> Document:
    """The YAML document at `path`, read within `limits` (see the module contract)."""
    limits = limits or LimitsSettings()
    text = _read_text(path, limits)
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise _issue(path, "is empty; expected a YAML mapping")
        try:
            nodes = _expanded_size(node, limits.max_yaml_nodes)
        except ValueError as exc:
            raise _issue(path, f"not accepted: {exc}") from None
        if nodes > limits.max_yaml_nodes:
            raise _issue(
                path,
                f"expands to more than {limits.max_yaml_nodes} YAML nodes (aliases counted "
                "expanded; set DAY0_LIMITS_MAX_YAML_NODES to raise it)",
            )
        if _depth(node, MAX_DEPTH) > MAX_DEPTH:
            raise _issue(path, f"nests deeper than {MAX_DEPTH} levels; expected a spec")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _issue(path, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise _issue(path, "nests too deeply to read") from None
    finally:
        loader.dispose()


def safe_load(text: str) -> Document:
    """YAML that day0 wrote itself (no limits needed), parsed with the same fast safe loader."""
    return yaml.load(text, Loader=_SafeLoader)


def safe_dump(data: object) -> str:
    """`yaml.safe_dump(data, sort_keys=False)` through libyaml's emitter when present."""
    return yaml.dump(data, Dumper=_SafeDumper, sort_keys=False)
