"""Run the pod runner standalone until SIGINT/SIGTERM (then it kills its pods and deletes its Nodes):

    python -m testsupport.pod_runner --kubeconfig K --pool ray:3:day0.io/accel=1 \
        [--label ray=day0.io/role=ray] [--taint ray=day0.io/accel=present:NoSchedule] [--max-grace-s 5]

Exit 2 on bad arguments (naming the argument), 1 when the API server cannot be reached.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from pydantic import ValidationError

from testsupport.pod_runner.nodes import Pool, parse_pool
from testsupport.pod_runner.runner import PodRunner


def _per_pool(values: list[str], flag: str, pools: dict[str, Pool]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for value in values:
        pool, sep, rest = value.partition("=")
        if not sep or pool not in pools:
            raise ValueError(f"{flag} {value!r}: expected POOL=..., with POOL one of {sorted(pools)}")
        out.setdefault(pool, []).append(rest)
    return out


def _pools(args: argparse.Namespace) -> list[Pool]:
    pools = {p.name: p for p in (parse_pool(text) for text in args.pool)}
    labels = _per_pool(args.label, "--label", pools)
    taints = _per_pool(args.taint, "--taint", pools)
    out = []
    for name, pool in pools.items():
        extra = dict(item.split("=", 1) for item in labels.get(name, []) if "=" in item)
        data = {**pool.model_dump(), "labels": extra, "taints": taints.get(name, [])}
        data.update(cpus=args.cpus, memory_gib=args.memory_gib)
        out.append(Pool.model_validate(data))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testsupport.pod_runner", description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--pool", action="append", required=True, help="NAME:COUNT[:RESOURCE=N,...], repeatable")
    ap.add_argument("--label", action="append", default=[], help="POOL=key=value, repeatable")
    ap.add_argument("--taint", action="append", default=[], help="POOL=key[=value]:Effect, repeatable")
    ap.add_argument("--cpus", type=int, default=4)
    ap.add_argument("--memory-gib", type=int, default=8)
    ap.add_argument("--max-grace-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    try:
        pools = _pools(args)
    except ValidationError as exc:  # before ValueError, its base
        first = exc.errors()[0]
        ap.error(f"--pool: {'.'.join(map(str, first['loc']))}: {first['msg']}")
    except ValueError as exc:
        ap.error(str(exc))
    from kubernetes import client, config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        api = config.new_client_from_config(args.kubeconfig)
        client.VersionApi(api).get_code(_request_timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the API server is exit 1
        print(f"pod runner: API server from {args.kubeconfig} not reachable: {exc}", file=sys.stderr)
        return 1
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    runner = PodRunner(api, pools, max_grace_s=args.max_grace_s).start()
    print(f"pod runner {runner.runner_id}: nodes {', '.join(runner.node_names)}", flush=True)
    try:
        done.wait()
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
