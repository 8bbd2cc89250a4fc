"""What a pod resolves: its /etc/hosts, with every Service and the API server in it.

Why a hosts file: pods share this machine's network namespace, each with its own loopback address
(127.B.x.y, B per runner), and EndpointSlices refuse loopback addresses, so there is no kube-proxy
and no cluster DNS. Each Service (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`)
resolves to one selected pod of this runner (a ready one first, then the oldest), and
`kubernetes.default...` to the API server when its host is an address.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["endpoint", "hosts_block", "hosts_file"]


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def endpoint(svc: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], prefix: str) -> str | None:
    """The address of the pod `svc` resolves to: of its namespace, not being deleted, with an address
    starting with `prefix` (this runner's pods), selected by it; None if there is none."""
    ns, selector = svc["metadata"]["namespace"], (svc.get("spec") or {}).get("selector") or {}
    candidates = [
        p
        for p in pods
        if p["metadata"]["namespace"] == ns
        and not p["metadata"].get("deletionTimestamp")
        and str((p.get("status") or {}).get("podIP") or "").startswith(prefix)
        and _selects(selector, p["metadata"].get("labels") or {})
    ]
    candidates.sort(key=lambda p: (not _ready(p), p["metadata"].get("creationTimestamp") or ""))
    return candidates[0]["status"]["podIP"] if candidates else None


def hosts_block(
    api_host: str, services: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], prefix: str
) -> str:
    """The lines every pod's /etc/hosts shares: the API server's names, then each Service with an endpoint."""
    pods = list(pods)
    lines = []
    if api_host.replace(".", "").isdigit():
        names = [
            "kubernetes",
            *(f"kubernetes.{d}" for d in ("default", "default.svc", "default.svc.cluster.local")),
        ]
        lines.append(f"{api_host}\t{' '.join(names)}")
    for svc in sorted(services, key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
        ip = endpoint(svc, pods, prefix)
        if ip:
            n, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
            lines.append(f"{ip}\t{n}.{ns}.svc.cluster.local {n}.{ns}.svc {n}.{ns} {n}")
    return "".join(f"{line}\n" for line in lines)


def hosts_file(pod: Mapping[str, Any], block: str) -> str:
    """A pod's whole /etc/hosts: localhost, its own hostname at its address, then the shared `block`."""
    ip = pod["status"]["podIP"]
    hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
    return f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}\t{hostname}\n" + block
