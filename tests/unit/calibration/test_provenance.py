"""A calibrated profile's provenance: who measured it, when and where; replacing it keeps the replaced one
(byte for byte, in the platform's calibration history, named by the new one); the plan names the
profile it used, in its text and its JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from cli.plan import add_plan_command
from day0.paths import CONFIGS_DIR
from day0.planner.profile import (
    CalibratedProfile,
    CollectivePoint,
    GemmPoint,
    Measurement,
    load_profile,
    profile_key,
    store_profile,
)
from day0.spec.pipeline import load_platform
from day0.store import open_store

WHO = Measurement(
    user="alice",
    host="bench-1",
    nodes=["node-a", "node-b"],
    devices=["cpu: Xeon 8480", "cpu: Xeon 8480", "cpu: Xeon 8480"],
    day0_version="9.9.9",
)


def _profile(created: str, measured: Measurement | None = WHO) -> CalibratedProfile:
    return CalibratedProfile(
        platform="cpu",
        backend="gloo",
        workers=3,
        created=created,
        datasheet=load_platform("cpu").hardware,
        gemm=[GemmPoint(dtype=d, m=128, n=128, k=128, tflops=0.05) for d in ("fp32", "bf16")],
        hbm_bandwidth_gbps=20.0,
        collectives=[CollectivePoint(op="all_reduce", bytes=1 << 20, seconds=1e-3, bus_gbps=1.5)],
        collective_latency_us=50.0,
        measured=measured,
    )


def test_replacing_a_profile_keeps_the_replaced_one(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    first_key, first = store_profile(store, _profile("2026-12-01T10:00:00Z"))
    assert first.replaced is None and first_key == profile_key("cpu")
    before = store.get_bytes(first_key)
    bob = WHO.model_copy(update={"user": "bob", "host": "bench-2"})
    _, second = store_profile(store, _profile("2026-12-05T21:00:00Z", bob))
    _, third = store_profile(store, _profile("2026-12-05T21:00:00Z"))  # a second profile in the same second

    assert load_profile(store, "cpu") == third
    history = store.list("calibration/cpu/history/")
    assert history == ["calibration/cpu/history/20261201T100000Z.json", "calibration/cpu/history/20261205T210000Z.json"]
    assert store.get_bytes(history[0]) == before  # as it was written, not re-serialised
    assert second.replaced == store.url(history[0]) and third.replaced == store.url(history[1])
    replaced = CalibratedProfile.model_validate_json(store.get_bytes(history[1]))
    assert replaced.measured is not None and (replaced.measured.user, replaced.measured.host) == ("bob", "bench-2")


def test_a_corrupt_profile_replaced_is_kept_too(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    store.put_bytes(profile_key("cpu"), b"{not json")
    _, written = store_profile(store, _profile("2026-12-05T21:00:00Z"))
    assert written.replaced == store.url("calibration/cpu/history/unknown.json")
    assert store.get_bytes("calibration/cpu/history/unknown.json") == b"{not json"


def test_the_profile_says_who_when_and_where() -> None:
    assert _profile("2026-12-05T21:00:00Z").describe() == (
        "calibrated profile of 2026-12-05T21:00:00Z (gloo, 3 workers) measured by alice@bench-1 on node-a, "
        "node-b (3 x cpu: Xeon 8480), day0 9.9.9"
    )
    assert "who measured it and where not recorded" in _profile("2026-12-05T21:00:00Z", None).describe()
    old = _profile("2026-12-05T21:00:00Z").model_dump(mode="json")
    del old["measured"], old["replaced"]  # a profile written before provenance was recorded still loads
    assert CalibratedProfile.model_validate(old).measured is None


def _plan(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="day0")
    add_plan_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def test_the_plan_names_the_profile_it_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = yaml.safe_load((CONFIGS_DIR / "pipelines" / "tiny-local.yaml").read_text())
    raw["storage"] = f"file://{tmp_path / 'store'}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    store_profile(open_store(raw["storage"]), _profile("2026-12-05T21:00:00Z"))
    named = "calibrated profile of 2026-12-05T21:00:00Z (gloo, 3 workers) measured by alice@bench-1"

    assert _plan([str(spec), "--out", str(tmp_path / "plan.yaml")]) == 0
    assert f"- note: {named}" in capsys.readouterr().out
    assert _plan([str(spec), "--json", "--out", str(tmp_path / "plan2.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(n.startswith(named) for n in doc["cluster"]["notes"])
