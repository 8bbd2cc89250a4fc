"""`PodRunner`: a process kubelet for the test control plane, beside kwok.

Why: kwok's pods run nothing, so KubeRay's Ray pods never start Ray. The runner registers its own
Nodes and runs the pods bound to them as real process trees (see `sandbox`), so a RayCluster
scheduled onto them runs real `ray start` commands, real probes and the real autoscaler.

Contracts:
- Watches, never polls: one pod watch (all namespaces: pods bound to its nodes are run, every
  pod feeds Service DNS), one Service watch, one watch of its own Nodes.
- Each pod gets a loopback address of its own (127.B.x.y, B random per runner), and an /etc/hosts
  that resolves every Service (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`) to a
  selected pod's address (EndpointSlices refuse loopback addresses, so there is no kube-proxy),
  and `kubernetes.default...` to the API server. `KUBERNETES_SERVICE_HOST/PORT` point at the API
  server, as kube-proxy would make the `kubernetes` Service reach it.
- Graceful deletion: SIGTERM, the grace period capped at `max_grace_s`, SIGKILL, then the pod
  object is deleted with grace 0. A deleted Node: SIGKILL of all its pods' processes at once.
- Nothing outlives it: processes are spawned from one long-lived thread with PDEATHSIG, `stop()`
  runs at exit and on SIGTERM/SIGHUP, and `start()` first sweeps leftovers of its node names.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay.watching import ResourceWatch
from day0.testing.pod_runner.expand import Lookup
from day0.testing.pod_runner.nodes import (
    RUNNER_LABEL,
    Pool,
    lease_manifest,
    node_manifest,
    node_status,
)
from day0.testing.pod_runner.pod import PodWorker
from day0.testing.pod_runner.sandbox import marked_processes, sweep
from day0.testing.pod_runner.volumes import Source

__all__ = ["PodRunner"]

log = logging.getLogger(__name__)
DEFAULT_ROOT = Path("/var/tmp/day0-pod-runner")  # not under /tmp: each container gets its own /tmp
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NOT_READY = "node.kubernetes.io/not-ready"
_PASS_THROUGH = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass
class _Node:
    name: str
    pool: Pool
    ip: str
    uid: str


class _ApiSource:
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


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


_LIVE: set[PodRunner] = set()  # started, not yet stopped: stopped at exit and on SIGTERM/SIGHUP


def _stop_all() -> None:
    for runner in list(_LIVE):
        runner.stop()


def _install_signal_handlers() -> None:
    """Once, from the main thread, where the signal's action is still the default: stop every
    runner, then die of the signal as before."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_DFL:
            continue

        def handler(signum: int, frame: FrameType | None) -> None:
            _stop_all()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


atexit.register(_stop_all)


def _runner_alive(runner_id: str) -> bool:
    """Whether the runner of this id (`r<pid>-<hex>`) still runs on this machine."""
    pid = runner_id[1:].split("-")[0] if runner_id.startswith("r") else ""
    return pid.isdigit() and int(pid) != 0 and Path(f"/proc/{pid}").exists()


class PodRunner:
    """`PodRunner(api_client, pools=[Pool(name="cpu", count=2)]).start()` ... `.stop()`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        pools: Sequence[Pool] = (),
        *,
        root: Path | None = None,
        venv: Path | None = None,
        max_grace_s: float = 5.0,
        backoff_s: float = 10.0,
        max_backoff_s: float = 300.0,
        heartbeat_s: float = 10.0,
        runner_id: str | None = None,
    ) -> None:
        self.api = api_client
        self.core: Any = client.CoreV1Api(api_client)  # dict bodies: the stubs want V1 models
        self.coord: Any = client.CoordinationV1Api(api_client)
        self.runner_id = runner_id or f"r{os.getpid()}-{secrets.token_hex(2)}"
        base = (root or DEFAULT_ROOT).resolve()
        if Path("/tmp") in (base, *base.parents) or Path("/dev/shm") in (base, *base.parents):
            raise ValueError(f"root {base}: must not be under /tmp or /dev/shm (containers get their own)")
        self.root = base / self.runner_id
        self.venv_bin = (venv / "bin") if venv else Path(sys.executable).parent
        repo = Path(__file__).resolve().parents[3]  # day0/testing/pod_runner/runner.py -> the checkout
        venv_root = self.venv_bin.absolute().parent
        self.code_dirs = [repo] + ([] if repo in venv_root.parents else [venv_root])
        self.max_grace_s, self.backoff_s, self.max_backoff_s = max_grace_s, backoff_s, max_backoff_s
        self.heartbeat_s = heartbeat_s
        self.pools = {p.name: p for p in pools}
        api_source = _ApiSource(self.core)
        self.source: Source = api_source
        self.lookup: Lookup = api_source.lookup
        server = urlparse(api_client.configuration.host)
        self._api_host, self._api_port = server.hostname or "127.0.0.1", server.port or 443
        self._octet = random.randint(16, 250)
        self._next_ip = 0
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {}
        self._counts: dict[str, int] = {}
        self._workers: dict[str, PodWorker] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._services: dict[str, dict[str, Any]] = {}
        self._terminating: set[str] = set()
        self._hosts_block = ""
        self._watches: list[ResourceWatch] = []
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pod-runner-spawn")
        self._started = False

    # -- public API --
    def start(self) -> PodRunner:
        self._sweep_dead_roots()
        self.root.mkdir(parents=True, exist_ok=True)
        names = [f"{p.name}-{i}" for p in self.pools.values() for i in range(p.count)]
        self._sweep_stale(names)
        for pool in self.pools.values():
            for _ in range(pool.count):
                self.add_node(pool.name)
        _LIVE.add(self)
        _install_signal_handlers()
        self._started = True
        self._follow(ResourceWatch(self.core.list_pod_for_all_namespaces, on_error=self._warn), self._on_pod)
        self._follow(ResourceWatch(self.core.list_service_for_all_namespaces, on_error=self._warn), self._on_service)
        self._follow(
            ResourceWatch(self.core.list_node, label_selector=f"{RUNNER_LABEL}={self.runner_id}", on_error=self._warn),
            self._on_node,
        )
        beat = threading.Thread(target=self._heartbeat, name="pod-runner-heartbeat", daemon=True)
        beat.start()
        self._threads.append(beat)
        self.wait_schedulable(self.node_names)
        return self

    def stop(self, delete_nodes: bool = True) -> None:
        """Kill every pod's processes, delete this runner's Nodes (their pods are then orphaned, as
        after a node loss), leave no process and no files."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        for w in self._watches:
            w.stop()
        with self._lock:
            workers, nodes = list(self._workers.values()), list(self._nodes)
        for worker in workers:
            worker.kill()
        if delete_nodes:
            for name in nodes:
                with contextlib.suppress(ApiException):
                    self.core.delete_node(name)
        sweep(lambda mark: mark.startswith(f"{self.runner_id}/"))
        for worker in workers:
            worker.finished.wait(10)
        self._spawner.shutdown(wait=True)
        shutil.rmtree(self.root, ignore_errors=True)
        _LIVE.discard(self)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def add_node(self, pool_name: str) -> str:
        """Register one more Node of a pool; returns its name."""
        pool = self.pools[pool_name]
        with self._lock:
            index = self._counts.get(pool_name, 0)
            self._counts[pool_name] = index + 1
            ip = self._ip()
        name = f"{pool.name}-{index}"
        made = self.core.create_node(node_manifest(name, pool, ip, self.runner_id))
        with self._lock:
            self._nodes[name] = _Node(name, pool, ip, made.metadata.uid)
        self._renew_lease(self._nodes[name])
        return name

    def wait_schedulable(self, names: Iterable[str], timeout_s: float = 60.0) -> None:
        """Watch until the node lifecycle controller has lifted `node.kubernetes.io/not-ready` (which the
        API server puts on every new Node) from `names`; TimeoutError names the nodes still tainted."""
        wanted = set(names)
        watch = ResourceWatch(
            self.core.list_node,
            label_selector=f"{RUNNER_LABEL}={self.runner_id}",
            deadline=time.monotonic() + timeout_s,
        )

        def tainted() -> set[str]:
            return {
                n.metadata.name
                for n in watch.objects.values()
                if n.metadata.name in wanted and any(t.key == _NOT_READY for t in n.spec.taints or [])
            }

        synced = False
        for kind, _ in watch:
            synced = synced or kind == "SYNCED"
            if synced and wanted <= {n.metadata.name for n in watch.objects.values()} and not tainted():
                watch.stop()
                return
        raise TimeoutError(f"nodes still tainted {_NOT_READY} after {timeout_s:.0f} s: {sorted(tainted())}")

    def delete_node(self, name: str) -> None:
        """Delete a Node through the API server; its pods' processes die at once (SIGKILL)."""
        with contextlib.suppress(ApiException):
            self.core.delete_node(name)
        self._node_gone(name)

    def pod_processes(self, namespace: str, name: str) -> list[int]:
        """Host PIDs of every process of a pod this runner runs (empty if none)."""
        worker = self._worker(namespace, name)
        return [] if worker is None else marked_processes(worker.mark.__eq__)

    def processes(self) -> list[int]:
        """Every process this runner started that is still alive."""
        return marked_processes(lambda mark: mark.startswith(f"{self.runner_id}/"))

    def container_pids(self, namespace: str, name: str) -> dict[str, int]:
        worker = self._worker(namespace, name)
        return {} if worker is None else worker.container_pids()

    def _worker(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            for worker in self._workers.values():
                meta = worker.pod["metadata"]
                if (meta["namespace"], meta["name"]) == (namespace, name):
                    return worker
        return None

    # -- the Host protocol of pod workers --
    def pod_dir(self, pod: Mapping[str, Any]) -> Path:
        meta = pod["metadata"]
        return self.root / f"{meta['namespace']}.{meta['name']}.{meta['uid'][:8]}"

    def node_ip(self, node: str) -> str:
        with self._lock:
            return self._nodes[node].ip if node in self._nodes else ""

    def allocatable(self, node: str) -> Mapping[str, str]:
        with self._lock:
            known = self._nodes.get(node)
        if known is None:
            return {}
        return dict(node_status(known.ip, node, known.pool)["allocatable"])

    def base_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        home = self.pod_dir(pod) / "home"
        home.mkdir(parents=True, exist_ok=True)
        api = f"{self._api_host}:{self._api_port}"
        env = {
            "PATH": f"{self.venv_bin}:{_SYSTEM_PATH}",
            "HOME": str(home),
            "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": self._api_host,
            "KUBERNETES_SERVICE_PORT": str(self._api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self._api_port),
            "KUBERNETES_PORT": f"tcp://{api}",
        }
        env.update({k: os.environ[k] for k in _PASS_THROUGH if k in os.environ})
        return env

    def write_hosts(self, pod: Mapping[str, Any], path: Path) -> None:
        ip = pod["status"]["podIP"]
        hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
        head = f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}\t{hostname}\n"
        with self._lock:
            block = self._hosts_block
        with path.open("w") as fh:  # in place: the bind mount holds this inode
            fh.write(head + block)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        """Start a process from the one long-lived spawning thread (its PDEATHSIG parent)."""
        return self._spawner.submit(
            subprocess.Popen,
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ).result()

    def post_status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status})
        except ApiException as exc:
            if exc.status not in (404, 409):
                log.warning("pod %s/%s: status not written: %s", meta["namespace"], meta["name"], exc.reason)

    # -- internals --
    def _ip(self) -> str:
        n = self._next_ip
        self._next_ip += 1
        return f"127.{self._octet}.{1 + n // 250}.{1 + n % 250}"

    def _warn(self, exc: Exception) -> None:
        log.warning("pod runner watch: %s", exc)

    def _follow(self, watch: ResourceWatch, handle: Callable[[str, dict[str, Any]], None]) -> None:
        def loop() -> None:
            for kind, obj in watch:
                if kind != "SYNCED" and not self._stopped.is_set():
                    try:
                        handle(kind, self.api.sanitize_for_serialization(obj))
                    except Exception:  # one bad event must not end the watch
                        log.exception("pod runner: handling %s failed", kind)

        self._watches.append(watch)
        thread = threading.Thread(target=loop, name="pod-runner-watch", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _sweep_stale(self, names: Iterable[str]) -> None:
        """Leftovers of a dead runner with these node names: processes, pods, Nodes. A Node of a
        live runner on this machine is refused (RuntimeError naming it), never taken over."""
        wanted = set(names)

        def stale(mark: str) -> bool:
            parts = mark.split("/")
            return len(parts) == 3 and parts[1] in wanted and not _runner_alive(parts[0])

        sweep(stale)
        for name in sorted(wanted):
            try:
                node = self.core.read_node(name)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            owner = (node.metadata.labels or {}).get(RUNNER_LABEL, "")
            if _runner_alive(owner):
                raise RuntimeError(f"node {name} belongs to pod runner {owner}, which is alive: pick other pool names")
            for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            with contextlib.suppress(ApiException):
                self.core.delete_node(name)
            self._wait_gone(name)

    def _sweep_dead_roots(self) -> None:
        """Files of runners that died without `stop()` (their id starts with their PID)."""
        for old in self.root.parent.glob("r*-*"):
            if not _runner_alive(old.name):
                shutil.rmtree(old, ignore_errors=True)

    def _wait_gone(self, node: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.core.read_node(node)
            except ApiException as exc:
                if exc.status == 404:
                    return
            time.sleep(0.2)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._node_gone(node["metadata"]["name"])

    def _node_gone(self, name: str) -> None:
        """Kill the node's pods and return once their processes are gone. Both `delete_node` and the
        watch's DELETED event call it, in either order: each waits, so neither returns early while
        the other is still killing."""
        with self._lock:
            self._nodes.pop(name, None)
            victims = [w for w in self._workers.values() if w.node == name]
        for worker in victims:
            worker.kill()
        deadline = time.monotonic() + 10
        while sweep(lambda mark: mark.startswith(f"{self.runner_id}/{name}/")) and time.monotonic() < deadline:
            time.sleep(0.05)  # SIGKILL is delivered asynchronously

    def _on_service(self, kind: str, svc: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                self._services.pop(svc["metadata"]["uid"], None)
            else:
                self._services[svc["metadata"]["uid"]] = svc
        self._refresh_hosts()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid, meta = pod["metadata"]["uid"], pod["metadata"]
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(uid, None)
                worker = self._workers.pop(uid, None)
            else:
                self._pods[uid] = pod
                worker = self._workers.get(uid)
            mine = (pod.get("spec") or {}).get("nodeName") in self._nodes
        if kind == "DELETED":
            if worker is not None:
                worker.kill()  # deleted with grace 0 (force): nothing waits for the kubelet
        elif mine and meta.get("deletionTimestamp"):
            self._begin_termination(uid, pod)
        elif mine and worker is None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            with self._lock:
                worker = PodWorker(self, pod, self._ip())
                self._workers[uid] = worker
            worker.start()
        elif worker is not None:
            worker.pod["metadata"] = meta  # labels and annotations as the API server has them now
        self._refresh_hosts()

    def _begin_termination(self, uid: str, pod: dict[str, Any]) -> None:
        with self._lock:
            if uid in self._terminating:
                return
            self._terminating.add(uid)
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        thread = threading.Thread(target=self._terminate, args=(uid, pod, float(grace)), daemon=True)
        thread.start()

    def _terminate(self, uid: str, pod: dict[str, Any], grace_s: float) -> None:
        with self._lock:
            worker = self._workers.get(uid)
        if worker is not None:
            worker.terminate(grace_s)
            worker.finished.wait()
        meta = pod["metadata"]
        with self._lock:
            alive = pod["spec"]["nodeName"] in self._nodes and not self._stopped.is_set()
        if alive:
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(
                    meta["name"],
                    meta["namespace"],
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)),
                )

    def _endpoint(self, svc: Mapping[str, Any]) -> str | None:
        ns, selector = svc["metadata"]["namespace"], (svc.get("spec") or {}).get("selector") or {}
        prefix = f"127.{self._octet}."
        candidates = [
            p
            for p in self._pods.values()
            if p["metadata"]["namespace"] == ns
            and not p["metadata"].get("deletionTimestamp")
            and str((p.get("status") or {}).get("podIP") or "").startswith(prefix)
            and _selects(selector, p["metadata"].get("labels") or {})
        ]
        candidates.sort(key=lambda p: (not _ready(p), p["metadata"].get("creationTimestamp") or ""))
        return candidates[0]["status"]["podIP"] if candidates else None

    def _refresh_hosts(self) -> None:
        with self._lock:
            lines = []
            if self._api_host.replace(".", "").isdigit():
                names = [
                    "kubernetes",
                    *(f"kubernetes.{d}" for d in ("default", "default.svc", "default.svc.cluster.local")),
                ]
                lines.append(f"{self._api_host}\t{' '.join(names)}")
            services = sorted(
                self._services.values(), key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])
            )
            for svc in services:
                ip = self._endpoint(svc)
                if ip:
                    n, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
                    lines.append(f"{ip}\t{n}.{ns}.svc.cluster.local {n}.{ns}.svc {n}.{ns} {n}")
            block = "".join(f"{line}\n" for line in lines)
            if block == self._hosts_block:
                return
            self._hosts_block = block
            workers = list(self._workers.values())
        for worker in workers:
            if worker.hosts_file.exists():
                self.write_hosts(worker.pod, worker.hosts_file)

    def _renew_lease(self, node: _Node) -> None:
        body = lease_manifest(node.name, node.uid, duration_s=max(40, int(self.heartbeat_s * 4)))
        try:
            self.coord.patch_namespaced_lease(node.name, "kube-node-lease", {"spec": body["spec"]})
        except ApiException as exc:
            if exc.status != 404:
                raise
            with contextlib.suppress(ApiException):
                self.coord.create_namespaced_lease("kube-node-lease", body)

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self.heartbeat_s):
            with self._lock:
                nodes = list(self._nodes.values())
            for node in nodes:
                try:
                    conditions = node_status(node.ip, node.name, node.pool)["conditions"]
                    self.core.patch_node_status(node.name, {"status": {"conditions": conditions}})
                    self._renew_lease(node)
                except ApiException as exc:
                    if exc.status != 404:
                        log.warning("node %s: heartbeat failed: %s", node.name, exc.reason)
