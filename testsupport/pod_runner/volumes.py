"""A pod's volumes as directories on this machine, ready to bind-mount into its containers.

Why: KubeRay's pods need emptyDirs (`/tmp/ray`, `/dev/shm`), and the autoscaler needs the
projected service-account volume (a TokenRequest token bound to the pod, the cluster CA and the
namespace) to call the API server with its real RBAC. Everything is written once, when the pod
starts: ConfigMap, Secret and token updates are not propagated (tokens last an hour; tests are
shorter). `medium: Memory` emptyDirs are plain directories.

Supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected (serviceAccountToken,
configMap, secret, downwardAPI). Anything else raises `VolumeError` naming the volume.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from testsupport.pod_runner.expand import EnvError, field_value, resource_value

__all__ = ["Source", "VolumeError", "materialise"]

_DEFAULT_MODE = 0o644


class VolumeError(ValueError):
    """A volume of the pod cannot be materialised (unsupported, or its source is missing)."""


class Source(Protocol):
    """What volumes are made from: read from the API server by the runner."""

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None: ...

    def token(self, pod: Mapping[str, Any], audience: str | None, expiration_s: int) -> str: ...


def _write(root: Path, rel: str, data: bytes, mode: int) -> None:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise VolumeError(f"item path {rel!r} escapes its volume")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)


def _keyed(
    root: Path, what: str, data: Mapping[str, bytes] | None, spec: Mapping[str, Any], mode: int, ident: str
) -> None:
    """configMap/secret volume or projection: every key, or only `items` (key -> path, mode)."""
    if data is None:
        if spec.get("optional"):
            return
        raise VolumeError(f"{what} {ident} not found")
    items = spec.get("items")
    if not items:
        for key, value in data.items():
            _write(root, key, value, mode)
        return
    for item in items:
        if item["key"] not in data:
            if spec.get("optional"):
                continue
            raise VolumeError(f"{what} {ident} has no key {item['key']!r}")
        _write(root, item["path"], data[item["key"]], int(item.get("mode") or mode))


def _downward(root: Path, pod: Mapping[str, Any], items: list[Mapping[str, Any]], mode: int) -> None:
    allocatable: Mapping[str, str] = {}
    for item in items:
        try:
            if "fieldRef" in item:
                value = field_value(pod, str(item["fieldRef"]["fieldPath"]))
            else:
                ref = item["resourceFieldRef"]
                container = next(c for c in pod["spec"]["containers"] if c["name"] == ref.get("containerName"))
                value = resource_value(container, ref, allocatable)
        except (EnvError, KeyError, StopIteration) as exc:
            raise VolumeError(f"downwardAPI item {item.get('path')!r}: {exc}") from exc
        _write(root, item["path"], value.encode(), int(item.get("mode") or mode))


def _projected(root: Path, pod: Mapping[str, Any], spec: Mapping[str, Any], source: Source) -> None:
    ns = pod["metadata"]["namespace"]
    mode = int(spec.get("defaultMode") or _DEFAULT_MODE)
    for part in spec.get("sources") or []:
        if "serviceAccountToken" in part:
            sat = part["serviceAccountToken"]
            token = source.token(pod, sat.get("audience"), int(sat.get("expirationSeconds") or 3600))
            _write(root, sat["path"], token.encode(), mode)
        elif "configMap" in part:
            cm = part["configMap"]
            _keyed(root, "ConfigMap", source.config_map(ns, cm["name"]), cm, mode, f"{ns}/{cm['name']}")
        elif "secret" in part:
            sec = part["secret"]
            _keyed(root, "Secret", source.secret(ns, sec["name"]), sec, mode, f"{ns}/{sec['name']}")
        elif "downwardAPI" in part:
            _downward(root, pod, part["downwardAPI"].get("items") or [], mode)
        else:
            raise VolumeError(f"projected source {sorted(part)} is not supported")


def _host_path(spec: Mapping[str, Any]) -> Path:
    path, kind = Path(spec["path"]), spec.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    elif kind in ("Directory", "File") and not (path.is_dir() if kind == "Directory" else path.is_file()):
        raise VolumeError(f"hostPath {path} is not an existing {kind.lower()}")
    return path


def materialise(pod: Mapping[str, Any], pod_dir: Path, source: Source) -> dict[str, Path]:
    """Write every volume of `pod` under `pod_dir/volumes/`; volume name -> its directory (hostPath: the path)."""
    out: dict[str, Path] = {}
    ns = pod["metadata"]["namespace"]
    for vol in pod["spec"].get("volumes") or []:
        name = vol["name"]
        root = pod_dir / "volumes" / name
        try:
            if "hostPath" in vol:
                out[name] = _host_path(vol["hostPath"])
                continue
            root.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in vol:
                pass
            elif "configMap" in vol:
                cm = vol["configMap"]
                mode = int(cm.get("defaultMode") or _DEFAULT_MODE)
                _keyed(root, "ConfigMap", source.config_map(ns, cm["name"]), cm, mode, f"{ns}/{cm['name']}")
            elif "secret" in vol:
                sec = vol["secret"]
                mode = int(sec.get("defaultMode") or _DEFAULT_MODE)
                ident = f"{ns}/{sec['secretName']}"
                _keyed(root, "Secret", source.secret(ns, sec["secretName"]), sec, mode, ident)
            elif "downwardAPI" in vol:
                dapi = vol["downwardAPI"]
                _downward(root, pod, dapi.get("items") or [], int(dapi.get("defaultMode") or _DEFAULT_MODE))
            elif "projected" in vol:
                _projected(root, pod, vol["projected"], source)
            else:
                kinds = sorted(k for k in vol if k != "name")
                raise VolumeError(f"volume type {kinds} is not supported by the pod runner")
        except VolumeError as exc:
            raise VolumeError(f"volume {name!r}: {exc}") from exc
        out[name] = root
    return out
