"""Reading the YAML files a user hands day0 (specs, platforms, clusters), bounded.

Contract: `read_user_yaml(path)` returns the parsed document or raises `SpecError` naming the file:
missing, a directory, larger than `DAY0_LIMITS_MAX_FILE_BYTES`, not UTF-8, empty, not valid YAML,
a mapping with a duplicate key, or aliases expanding past `DAY0_LIMITS_MAX_YAML_NODES` (an alias
bomb is refused from its node graph, before anything walks the expanded value). Messages never
echo the document's values beyond PyYAML's position marks. Parsing uses libyaml (`CSafeLoader`,
about ten times faster than the pure-Python loader on a spec) when PyYAML was built with it, and
`safe_dump` its emitter likewise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

try:
    from yaml import CSafeDumper as _SafeDumper
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

from day0.errors import SpecError, SpecIssue
from day0.settings import LimitsSettings

__all__ = ["read_user_yaml", "safe_dump", "safe_load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _BoundedLoader(_SafeLoader):
    """The safe loader, refusing duplicate mapping keys."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
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


def _read_text(path: Path, limits: LimitsSettings) -> str:
    try:
        if path.is_dir():
            raise _issue(path, "is a directory; expected a YAML file")
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            raise _issue(
                path,
                f"is {size} bytes; the limit is {limits.max_file_bytes} (set DAY0_LIMITS_MAX_FILE_BYTES to raise it)",
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise _issue(path, "file not found") from None
    except OSError as exc:
        raise _issue(path, f"cannot be read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _issue(path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def read_user_yaml(path: Path, limits: LimitsSettings | None = None) -> Any:
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
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _issue(path, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise _issue(path, "nests too deeply to read") from None
    finally:
        loader.dispose()


def safe_load(text: str) -> Any:
    """YAML that day0 wrote itself (no limits needed), parsed with the same fast safe loader."""
    return yaml.load(text, Loader=_SafeLoader)


def safe_dump(data: Any) -> str:
    """`yaml.safe_dump(data, sort_keys=False)` through libyaml's emitter when present."""
    return yaml.dump(data, Dumper=_SafeDumper, sort_keys=False)
