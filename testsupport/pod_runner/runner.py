"""`PodRunner`: a process kubelet for the test control plane, beside kwok.

Why: kwok's pods run nothing, so KubeRay's Ray pods never start Ray. The runner registers its own
Nodes and runs the pods bound to them as real process trees (see `sandbox`), so a RayCluster
scheduled onto them runs real `ray start` commands, real probes and the real autoscaler.

Contracts:
- Watches, never polls: one pod watch (all namespaces: pods bound to its nodes are run, every
  pod feeds Service DNS), one Service watch, one watch of its own Nodes.
- Each pod gets a loopback address of its own (127.B.x.y, B random per runner), and an /etc/hosts
  that resolves every Service to a selected pod's address and `kubernetes.default...` to the API
  server (`service_dns`). `KUBERNETES_SERVICE_HOST/PORT` point at the API server (`expand.base_env`).
- Graceful deletion: SIGTERM, the grace period capped at `max_grace_s`, SIGKILL, then the pod
  object is deleted with grace 0. A deleted Node: SIGKILL of all its pods' processes at once.
- Nothing outlives it: processes are spawned from one long-lived thread with PDEATHSIG, `stop()`
  runs at exit and on SIGTERM/SIGHUP, and `start()` first sweeps leftovers of its node names
  (`lifetime`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay.watching import ResourceWatch
from testsupport.pod_runner.api_source import ApiSource
from testsupport.pod_runner.expand import Lookup, base_env
from testsupport.pod_runner.lifetime import LIVE, install_signal_handlers, sweep_dead_roots, sweep_stale
from testsupport.pod_runner.node_api import RunnerNode, heartbeat, renew_lease, wait_schedulable
from testsupport.pod_runner.nodes import RUNNER_LABEL, Pool, node_manifest, node_status
from testsupport.pod_runner.pod import PodWorker
from testsupport.pod_runner.sandbox import marked_processes, sweep
from testsupport.pod_runner.service_dns import hosts_block, hosts_file
from testsupport.pod_runner.volumes import Source

__all__ = ["PodRunner"]

log = logging.getLogger(__name__)
DEFAULT_ROOT = Path("/var/tmp/day0-pod-runner")  # not under /tmp: each container gets its own /tmp


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
        repo = Path(__file__).resolve().parents[2]  # testsupport/pod_runner/runner.py -> the checkout
        venv_root = self.venv_bin.absolute().parent
        self.code_dirs = [repo] + ([] if repo in venv_root.parents else [venv_root])
        self.max_grace_s, self.backoff_s, self.max_backoff_s = max_grace_s, backoff_s, max_backoff_s
        self.heartbeat_s = heartbeat_s
        self.pools = {p.name: p for p in pools}
        api_source = ApiSource(self.core)
        self.source: Source = api_source
        self.lookup: Lookup = api_source.lookup
        server = urlparse(api_client.configuration.host)
        self._api_host, self._api_port = server.hostname or "127.0.0.1", server.port or 443
        self._octet = random.randint(16, 250)
        self._next_ip = 0
        self._lock = threading.RLock()
        self._nodes: dict[str, RunnerNode] = {}
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
        sweep_dead_roots(self.root.parent)
        self.root.mkdir(parents=True, exist_ok=True)
        names = [f"{p.name}-{i}" for p in self.pools.values() for i in range(p.count)]
        sweep_stale(self.core, names)
        for pool in self.pools.values():
            for _ in range(pool.count):
                self.add_node(pool.name)
        LIVE.add(self)
        install_signal_handlers()
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
        LIVE.discard(self)

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
            self._nodes[name] = RunnerNode(name, pool, ip, made.metadata.uid)
        renew_lease(self.coord, self._nodes[name], self._lease_s)
        return name

    def wait_schedulable(self, names: Iterable[str], timeout_s: float = 60.0) -> None:
        """Watch until the node lifecycle controller has lifted `node.kubernetes.io/not-ready` (which the
        API server puts on every new Node) from `names`; TimeoutError names the nodes still tainted."""
        wait_schedulable(self.core, self.runner_id, names, timeout_s)

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
        hostname = pod["spec"].get("hostname") or pod["metadata"]["name"]
        return base_env(
            hostname=hostname, home=home, bin_dir=self.venv_bin, api_host=self._api_host, api_port=self._api_port
        )

    def write_hosts(self, pod: Mapping[str, Any], path: Path) -> None:
        with self._lock:
            block = self._hosts_block
        text = hosts_file(pod, block)
        with path.open("w") as fh:  # in place: the bind mount holds this inode
            fh.write(text)

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

    def _refresh_hosts(self) -> None:
        with self._lock:
            block = hosts_block(self._api_host, self._services.values(), self._pods.values(), f"127.{self._octet}.")
            if block == self._hosts_block:
                return
            self._hosts_block = block
            workers = list(self._workers.values())
        for worker in workers:
            if worker.hosts_file.exists():
                self.write_hosts(worker.pod, worker.hosts_file)

    @property
    def _lease_s(self) -> int:
        return max(40, int(self.heartbeat_s * 4))

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self.heartbeat_s):
            with self._lock:
                nodes = list(self._nodes.values())
            for node in nodes:
                heartbeat(self.core, self.coord, node, self._lease_s)
