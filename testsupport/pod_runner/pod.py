"""One pod's life on a runner node, in its own thread: init containers, containers, probes, restarts, status.

Why a thread per pod: a kubelet's pod worker owns one pod's state machine; keeping each pod's
containers, probes and back-off in one loop (ticking twice a second) makes the status it writes
consistent, and termination (SIGTERM, the capped grace period, SIGKILL) a single code path.

Contracts:
- `PodWorker(host, pod, ip)` writes the pod's status like a kubelet: phase, the `Initialized`,
  `ContainersReady`, `Ready` and `PodReadyToStartContainers` conditions, container statuses with
  state, lastState, restartCount, ready and started, podIP(s), hostIP(s), startTime.
- A container runs only its `command`/`args` (images are not run); one without a command fails
  with `CreateContainerConfigError`, as does an unresolvable env reference or volume.
- `terminate(grace_s)` stops it gracefully (the runner then deletes the pod object); `kill()`
  SIGKILLs every process of the pod at once (node loss) and writes nothing more.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testsupport.pod_runner.container import ContainerRun
from testsupport.pod_runner.expand import EnvError, container_env, expand
from testsupport.pod_runner.host import Host
from testsupport.pod_runner.pod_status import conditions, phase, timestamp
from testsupport.pod_runner.probes import ProbeState, check
from testsupport.pod_runner.sandbox import MARK, Mount, init_pid, sandbox_argv, signal_tree, sweep
from testsupport.pod_runner.volumes import VolumeError, materialise

__all__ = ["PodWorker"]

_TICK_S = 0.5
log = logging.getLogger(__name__)


class PodWorker(threading.Thread):
    """Runs one pod until it is terminated or killed."""

    def __init__(self, host: Host, pod: dict[str, Any], ip: str) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.host, self.pod, self.ip = host, pod, ip
        self.uid: str = meta["uid"]
        self.name = f"{meta['namespace']}/{meta['name']}"
        self.node: str = pod["spec"]["nodeName"]
        self.mark = f"{host.runner_id}/{self.node}/{self.uid}"
        self.dir = host.pod_dir(pod)
        self.hosts_file = self.dir / "hosts"
        self.inits = [ContainerRun(c, init=True) for c in pod["spec"].get("initContainers") or []]
        self.mains = [ContainerRun(c) for c in pod["spec"].get("containers") or []]
        self.policy: str = pod["spec"].get("restartPolicy") or "Always"
        self.start_time = timestamp()
        self.finished = threading.Event()  # processes gone (after terminate/kill)
        self._stop = threading.Event()
        self._killed = False
        self._grace_s = 0.0
        self._lock = threading.Lock()
        self._volumes: dict[str, Path] = {}
        self._last_status: dict[str, Any] | None = None
        self._transitions: dict[str, tuple[str, str]] = {}  # condition -> (status, since)
        self._error: tuple[str, str] | None = None  # (reason, message) of a config error

    # -- control, from the runner's threads --
    def terminate(self, grace_s: float) -> None:
        self._grace_s = min(max(grace_s, 0.0), self.host.max_grace_s)
        self._stop.set()

    def kill(self) -> None:
        """SIGKILL every process of the pod now (its node is gone); no more status writes."""
        self._killed = True
        self._stop.set()
        with self._lock:
            for run in self.inits + self.mains:
                if run.proc is not None and run.proc.poll() is None:
                    signal_tree(run.proc, signal.SIGKILL)
        sweep(self.mark.__eq__)

    def container_pids(self) -> dict[str, int]:
        """Host PID of each running container's PID 1."""
        with self._lock:
            runs = [(r.name, r.proc) for r in self.inits + self.mains if r.proc is not None]
        out = {}
        for name, proc in runs:
            pid = init_pid(proc.pid) if proc.poll() is None else None
            if pid:
                out[name] = pid
        return out

    # -- the loop --
    def run(self) -> None:
        try:
            self._prepare()
            if self._error is None and self._run_inits():
                self._run_mains()
            while not self._stop.wait(_TICK_S):
                pass  # finished or misconfigured: hold the status until deleted
        except Exception as exc:  # noqa: BLE001 - a broken pod must not take the runner down
            self._error = ("RunnerError", f"{type(exc).__name__}: {exc}")
            self._post()
        finally:
            self._shutdown()

    def _prepare(self) -> None:
        self.pod.setdefault("status", {}).update(
            podIP=self.ip,
            podIPs=[{"ip": self.ip}],
            hostIP=self.host.node_ip(self.node),
            hostIPs=[{"ip": self.host.node_ip(self.node)}],
        )
        for sub in ("tmp", "shm", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").chmod(0o1777)
        self.host.write_hosts(self.pod, self.hosts_file)
        try:
            self._volumes = materialise(self.pod, self.dir, self.host.source)
        except VolumeError as exc:
            self._error = ("CreateContainerConfigError", str(exc))
        self._post()

    def _run_inits(self) -> bool:
        for run in self.inits:
            while not self._stop.is_set():
                if run.proc is None and time.monotonic() >= run.retry_at:
                    self._start(run)
                    self._post()
                if run.proc is not None and run.proc.poll() is not None:
                    self._exited(run)
                    if run.exit_code == 0:
                        break
                    if self.policy == "Never":
                        self._post()
                        return False
                self._post()
                self._stop.wait(_TICK_S)
            if self._stop.is_set():
                return False
        return True

    def _run_mains(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for run in self.mains:
                if run.proc is not None and run.proc.poll() is not None:
                    self._exited(run)
                if run.proc is None and self._may_start(run) and now >= run.retry_at:
                    self._start(run)
                if run.proc is not None:
                    self._probe(run, now)
            self._post()
            self._stop.wait(_TICK_S)

    def _may_start(self, run: ContainerRun) -> bool:
        if run.exit_code is None:
            return not run.started_at  # never started yet
        return self.policy == "Always" or (self.policy == "OnFailure" and run.exit_code != 0)

    # -- containers --
    def _mounts(self, spec: Mapping[str, Any]) -> list[Mount]:
        mounts = [
            Mount(self.dir / "tmp", "/tmp"),
            Mount(self.dir / "shm", "/dev/shm"),
            Mount(self.hosts_file, "/etc/hosts"),
            # the pod's own /tmp must not hide the code it runs (a checkout under /tmp, as in CI)
            *(Mount(d, str(d)) for d in self.host.code_dirs if Path("/tmp") in d.parents),
        ]
        for vm in spec.get("volumeMounts") or []:
            if vm["name"] not in self._volumes:
                raise VolumeError(f"volumeMount {vm['name']!r} names no volume of the pod")
            source = self._volumes[vm["name"]] / (vm.get("subPath") or "")
            mounts.append(Mount(source, vm["mountPath"], bool(vm.get("readOnly"))))
        return mounts

    def _start(self, run: ContainerRun) -> None:
        spec = run.spec
        try:
            env = container_env(
                self.pod,
                spec,
                lookup=self.host.lookup,
                allocatable=self.host.allocatable(self.node),
                base=self.host.base_env(self.pod),
            )
            # No command: the image's entrypoint runs with `args`. The runner knows no image, so it takes
            # the images it stands in for to have none (day0's has none: its CMD is replaced by `args`),
            # which is how a Prefect worker's flow-run Job (args only) starts.
            words = [*(spec.get("command") or []), *(spec.get("args") or [])]
            if not words:
                raise EnvError(
                    f"container {run.name!r} has no command or args: the pod runner runs commands, not images"
                )
            argv = [expand(str(a), env) for a in words]
            mounts = self._mounts(spec)
        except (EnvError, VolumeError) as exc:
            run.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            run.retry_at = time.monotonic() + self.host.max_backoff_s
            return
        env[MARK] = self.mark
        run.env = env
        hostname = self.pod["spec"].get("hostname") or self.pod["metadata"]["name"]
        if run.log is None:
            run.log = (self.dir / "logs" / f"{run.name}.log").open("ab")
        stage = self.dir / "stage" / f"{run.name}-{run.restarts}"
        argv = sandbox_argv(argv, mounts, stage, hostname, spec.get("workingDir"))
        proc = self.host.spawn(argv, env, run.log)
        with self._lock:
            run.proc = proc
        if self._stop.is_set():  # terminated meanwhile: _shutdown will stop it
            return
        run.started_at = timestamp()
        run.exit_code = None
        run.state = {"running": {"startedAt": run.started_at}}
        now = time.monotonic()
        run.probes = {
            k: ProbeState(spec[k], started_at=now)
            for k in ("startupProbe", "livenessProbe", "readinessProbe")
            if spec.get(k)
        }
        run.started = "startupProbe" not in run.probes
        run.ready = run.started and "readinessProbe" not in run.probes and not run.init

    def _exited(self, run: ContainerRun) -> None:
        assert run.proc is not None
        code = run.proc.returncode
        code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as runtimes report
        run.exit_code = code
        run.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": run.started_at,
                "finishedAt": timestamp(),
            }
        }
        with self._lock:
            run.proc = None
        run.ready = run.started = False
        if run.init and code == 0:
            return
        restart = run.init or self._may_start(run)
        if restart and self.policy != "Never":
            delay = min(self.host.backoff_s * 2**run.restarts, self.host.max_backoff_s)
            run.retry_at = time.monotonic() + delay
            run.last_state = run.state
            run.restarts += 1
            run.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {delay:.0f}s restarting"}}

    def _probe(self, run: ContainerRun, now: float) -> None:
        assert run.proc is not None
        ports = {p["name"]: int(p["containerPort"]) for p in run.spec.get("ports") or [] if p.get("name")}

        def run_exec(argv: Sequence[str], timeout: float) -> int:
            pid = init_pid(run.proc.pid) if run.proc is not None else None
            if pid is None:
                return 1
            cmd = ["nsenter", "-t", str(pid), "-m", "-u", "-p", "--", *argv]
            return subprocess.run(cmd, env=run.env, timeout=timeout, capture_output=True).returncode

        for kind, state in run.probes.items():
            if kind != "startupProbe" and not run.started:
                continue
            if not state.due(now) or (kind == "startupProbe" and run.started):
                continue
            ok = check(state.spec, pod_ip=self.ip, ports=ports, run_exec=run_exec)
            state.record(ok, time.monotonic())
            if kind == "startupProbe" and state.ok:
                run.started = True
                run.ready = "readinessProbe" not in run.probes
            elif kind == "readinessProbe":
                run.ready = state.ok
            if kind in ("startupProbe", "livenessProbe") and state.failed and not state.ok:
                self._stop_container(run, f"{kind} failed {state.failures} times")

    def _stop_container(self, run: ContainerRun, why: str) -> None:
        """Liveness/startup failure: stop the container (grace capped); the loop restarts it."""
        if run.proc is None:
            return
        grace = min(float(self.pod["spec"].get("terminationGracePeriodSeconds") or 30), self.host.max_grace_s)
        signal_tree(run.proc, signal.SIGTERM)
        try:
            run.proc.wait(grace)
        except subprocess.TimeoutExpired:
            signal_tree(run.proc, signal.SIGKILL)
            run.proc.wait()
        log.info("pod %s: container %s stopped: %s", self.name, run.name, why)

    # -- status --
    def _status(self) -> dict[str, Any]:
        mains = [r.status() for r in self.mains]
        if self._error is not None:
            reason, message = self._error
            for status in mains:
                status["state"] = {"waiting": {"reason": reason, "message": message}}
        return {
            "phase": phase(self.inits, self.mains, self.policy, self._error),
            "conditions": conditions(self.inits, self.mains, self._error, self._transitions),
            "hostIP": self.pod["status"]["hostIP"],
            "hostIPs": self.pod["status"]["hostIPs"],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "initContainerStatuses": [r.status() for r in self.inits],
            "containerStatuses": mains,
        }

    def _post(self) -> None:
        if self._killed:
            return
        status = self._status()
        if status == self._last_status:
            return
        self._last_status = status
        self.host.post_status(self.pod, status)

    # -- the end --
    def _shutdown(self) -> None:
        with self._lock:
            procs = [r.proc for r in self.inits + self.mains if r.proc is not None and r.proc.poll() is None]
        if not self._killed:
            for proc in procs:
                signal_tree(proc, signal.SIGTERM)
            deadline = time.monotonic() + self._grace_s
            for proc in procs:
                try:
                    proc.wait(max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    signal_tree(proc, signal.SIGKILL)
        for proc in procs:
            signal_tree(proc, signal.SIGKILL) if proc.poll() is None else None
            proc.wait()
        sweep(self.mark.__eq__)
        for run in self.inits + self.mains:
            if run.log is not None:
                run.log.close()
        for sub in ("tmp", "shm", "volumes", "stage"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        self.finished.set()
