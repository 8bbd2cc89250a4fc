"""`ApiSource`: what pods' volumes and env are made from, read from the API server.

ConfigMaps and Secrets (decoded to bytes; a missing one is None, so optional references can be
honoured) and TokenRequest tokens bound to the pod, for the projected service-account volume.
It implements `volumes.Source`, and its `lookup` is the `expand.Lookup` of env references.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

__all__ = ["ApiSource"]


class ApiSource:
    """ConfigMaps, Secrets and TokenRequest tokens from the API server (volumes and env)."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def _read(self, fn: Callable[..., Any], namespace: str, name: str) -> Any:
        try:
            return fn(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None:
        cm = self._read(self._core.read_namespaced_config_map, namespace, name)
        if cm is None:
            return None
        out = {k: v.encode() for k, v in (cm.data or {}).items()}
        out.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        return out

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        sec = self._read(self._core.read_namespaced_secret, namespace, name)
        return None if sec is None else {k: base64.b64decode(v) for k, v in (sec.data or {}).items()}

    def token(self, pod: Mapping[str, Any], audience: str | None, expiration_s: int) -> str:
        meta = pod["metadata"]
        spec: dict[str, Any] = {
            "expirationSeconds": max(expiration_s, 600),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        account = pod["spec"].get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        made = self._core.create_namespaced_service_account_token(account, meta["namespace"], body)
        return str(made.status.token)

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        data = self.config_map(namespace, name) if kind == "configmap" else self.secret(namespace, name)
        return None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}
