"""A container's environment and command line, resolved as the kubelet resolves them.

Why its own module: this is the part of a kubelet that decides what a process actually sees
(`valueFrom` references, `envFrom`, `$(VAR)` in env values, command and args), and it is pure
given the pod, the node and a way to read ConfigMaps and Secrets, so it is tested apart.

Rules followed (the kubelet's `expansion` package and `makeEnvironmentVariables`):
- `$(VAR)` becomes VAR's value if VAR is defined earlier (env) or at all (command/args); an
  undefined reference stays as written; `$$` is a literal `$`.
- Order: the kubelet's service variables (`base_env`), then `envFrom` (with its prefix), then `env` in order.
- `fieldRef`: metadata.name/namespace/uid, metadata.labels['k'] / annotations['k'] (or all of
  them), spec.nodeName, spec.serviceAccountName, status.podIP(s), status.hostIP(s).
- `resourceFieldRef`: limits/requests of cpu, memory, ephemeral-storage, divided by `divisor` and
  rounded up; an unset limit is the node's allocatable amount.
An unresolvable reference raises `EnvError` naming the variable (the kubelet's
CreateContainerConfigError).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

__all__ = ["EnvError", "Lookup", "base_env", "container_env", "expand", "field_value", "resource_value"]

# (kind "configmap" | "secret", namespace, name) -> the object's data (secrets already decoded), or None
Lookup = Callable[[str, str, str], Mapping[str, str] | None]
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PASS_THROUGH = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")  # from the runner's own env


class EnvError(ValueError):
    """A reference in a container's environment cannot be resolved."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, others kept, `$$` -> `$`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] != "$" or i + 1 == n:
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:  # an incomplete reference is kept as written
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def _subscript(path: str, prefix: str) -> str | None:
    """`metadata.labels['k']` -> `k` (for prefix `metadata.labels`)."""
    rest = path[len(prefix) :]
    if rest.startswith("['") and rest.endswith("']"):
        return rest[2:-2]
    return None


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """The downward API's value of `path` for `pod` (a pod as a camelCase dict)."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p["ip"] for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix in ("metadata.labels", "metadata.annotations"):
        values: Mapping[str, str] = meta.get(prefix.split(".")[1]) or {}
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
        key = _subscript(path, prefix)
        if key is not None:
            return str(values.get(key, ""))
    raise EnvError(f"fieldRef.fieldPath {path!r} is not supported")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any], allocatable: Mapping[str, str]) -> str:
    """A `resourceFieldRef` value: the container's limit or request over `divisor`, rounded up."""
    kind, _, name = str(ref.get("resource", "")).partition(".")
    if kind not in ("limits", "requests") or not name:
        raise EnvError(f"resourceFieldRef.resource {ref.get('resource')!r} is not limits.X or requests.X")
    amounts = (container.get("resources") or {}).get(kind) or {}
    raw = amounts.get(name)
    if raw is None and kind == "requests":
        raw = ((container.get("resources") or {}).get("limits") or {}).get(name)
    if raw is None:
        raw = allocatable.get(name, "0")  # an unset limit is the node's allocatable (requests: 0)
        if kind == "requests" and name not in amounts:
            raw = "0"
    divisor = parse_quantity(str(ref.get("divisor") or "1")) or Decimal(1)  # the API server defaults it to 0
    return str(math.ceil(Decimal(parse_quantity(str(raw))) / Decimal(divisor)))


def _ref_value(ref_kind: str, ref: Mapping[str, Any], namespace: str, lookup: Lookup, var: str) -> str | None:
    kind = "configmap" if ref_kind == "configMapKeyRef" else "secret"
    data = lookup(kind, namespace, str(ref.get("name", "")))
    key = str(ref.get("key", ""))
    if data is not None and key in data:
        return data[key]
    if ref.get("optional"):
        return None
    what = "ConfigMap" if kind == "configmap" else "Secret"
    raise EnvError(f"env {var}: {what} {namespace}/{ref.get('name')} has no key {key!r}")


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    lookup: Lookup,
    allocatable: Mapping[str, str],
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment the kubelet gives `container`: `base` (service variables and the image's
    defaults), then envFrom, then env with `$(VAR)` expanded against what came before."""
    namespace = pod.get("metadata", {}).get("namespace", "default")
    env: dict[str, str] = dict(base or {})
    for source in container.get("envFrom") or []:
        ref_kind = "configmap" if "configMapRef" in source else "secret"
        ref = source.get("configMapRef") or source.get("secretRef") or {}
        data = lookup(ref_kind, namespace, str(ref.get("name", "")))
        if data is None and not ref.get("optional"):
            raise EnvError(f"envFrom: {ref_kind} {namespace}/{ref.get('name')} not found")
        env.update({f"{source.get('prefix', '')}{k}": v for k, v in (data or {}).items()})
    for var in container.get("env") or []:
        name = str(var["name"])
        if "value" in var or "valueFrom" not in var:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, str(source["fieldRef"]["fieldPath"]))
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            target = next(
                (c for c in pod["spec"].get("containers", []) if c["name"] == ref.get("containerName")),
                container,
            )
            env[name] = resource_value(target, ref, allocatable)
        else:
            key_ref = next((k for k in ("configMapKeyRef", "secretKeyRef") if k in source), None)
            if key_ref is None:
                raise EnvError(f"env {name}: unsupported valueFrom {sorted(source)}")
            value = _ref_value(key_ref, source[key_ref], namespace, lookup, name)
            if value is not None:
                env[name] = value
    return env


def base_env(*, hostname: str, home: Path, bin_dir: Path, api_host: str, api_port: int) -> dict[str, str]:
    """`container_env`'s `base` on the runner: PATH with `bin_dir` (the project's virtualenv) first, the
    pod's own HOME, the kubelet's service variables of the `kubernetes` Service pointing at the API
    server (as kube-proxy would make it reach it), and the runner's hub offline switches."""
    api = f"{api_host}:{api_port}"
    env = {
        "PATH": f"{bin_dir}:{_SYSTEM_PATH}",
        "HOME": str(home),
        "HOSTNAME": hostname,
        "LANG": "C.UTF-8",
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
        "KUBERNETES_PORT": f"tcp://{api}",
    }
    env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
    return env
