"""Step 5 through Ray Train: an aligned reference/candidate trial (fp32 single-worker reference, bf16
2-worker DDP candidate: distinct curves that align), and a task rerun on an S3-compatible store that
resumes from the checkpoint instead of starting over, after a crash injected through the environment."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from day0.model.source import resolve_model
from day0.paths import CONFIGS_DIR
from day0.runs.context import RunContext
from day0.spec.pipeline import load_yaml, spec_from_dict
from day0.steps.trial.loop import LoopStep, run_steps
from day0.steps.trial.result import TrialCurve, TrialResult
from tests.fixtures.trial import tiny_data, tiny_loop

pytestmark = pytest.mark.integration

TRIAL = {
    "scale": {"layers": 2, "hidden": 64, "experts": 4},
    "steps": 12,
    "seq_len": 32,
    "micro_batch": 2,
    "learning_rate": 3e-3,
    "checkpoint_every": 5,
    "tolerance": {"warmup_steps": 4},
}


def _spec(storage: str, **trial: Any):
    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    raw["trial"] = TRIAL | trial
    raw["storage"] = storage
    return spec_from_dict(raw)


def test_aligned_trial_two_workers(local_ray, tmp_path: Path) -> None:
    from day0.steps.trial.run import PlannerMemoryEstimate
    from day0.steps.trial.train import run_trial

    spec = _spec(f"file://{tmp_path}", workers=2)
    assert spec.training.precision.compute == "bf16"  # the default spec's plan trains at bf16
    result = run_trial(
        spec,
        resolve_model(spec.model),
        checkpoint_uri=f"file://{tmp_path}/ckpt",
        memory_estimate=PlannerMemoryEstimate(spec.platform.hardware),
    )
    assert result.alignment.passed, result.alignment.failures
    assert result.verdict == "pass" and result.passed and result.global_batch == 4
    ref, cand = result.reference, result.candidate
    assert (ref.device, ref.compute_dtype, ref.workers) == ("cpu", "fp32", 1)
    assert (cand.device, cand.compute_dtype, cand.workers, cand.sharding) == ("cpu", "bf16", 2, "ddp")
    # Two curves that differ (bf16 autocast, 2-rank all-reduce), not one curve twice
    diffs = [abs(c - r) for r, c in zip(ref.loss, cand.loss)]
    assert result.alignment.first_step_abs_diff > 0 and sum(d > 0 for d in diffs) >= len(diffs) - 1, diffs
    assert result.headline["candidate"] == "cpu bf16 x2 (ddp)" and result.headline["reference"] == "cpu fp32 x1"
    assert len(result.reference.loss) == len(result.candidate.loss) == 12
    assert [r.steps_executed for r in result.runs] == [12, 12]
    assert [m.rank for m in result.memory] == [0, 1] and all(m.measured_training_bytes > 0 for m in result.memory)
    assert all(m.estimate_bytes for m in result.memory)
    assert (tmp_path / "ckpt" / "candidate").is_dir() and result.runs[1].checkpoint_path.endswith("step_000012")
    md = result.to_markdown()
    assert "PASS" in md and "mean relative loss error" in md and "loss.png" in md
    assert "| cpu | cpu | bf16 | 2 | ddp |" in md and "| cpu | cpu | fp32 | 1 | ddp |" in md
    assert result.files()["loss.png"][:8] == b"\x89PNG\r\n\x1a\n"
    TrialResult.model_validate_json(result.model_dump_json())  # round-trips as the step's result.json


def test_task_rerun_resumes_from_s3_checkpoint(
    local_ray, s3_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from day0.steps.analyze.run import analyze_model
    from day0.steps.optimize.plan import optimize_for_spec
    from day0.steps.parallel.plan import plan_for_spec
    from day0.steps.trial.train import TrialTrainingError
    from tasks.steps import TASKS

    # The reference: a stored curve (public API: trial.reference = a URI), made here by the bare loop.
    ref = [
        LoopStep.model_validate(h)
        # the candidate's data: 1 worker x micro_batch 2 = 2 sequences a step (a reference on other
        # batches is another training, which the noise-derived threshold rightly refuses)
        for h in run_steps(tiny_loop(12, global_batch=2, micro_batch=2, lr_warmup_steps=1), tiny_data().tokens)
    ]
    curve = TrialCurve.from_history(ref, "stored reference", "cpu", "fp32", workers=1)
    (tmp_path / "ref.json").write_text(curve.model_dump_json())
    spec = _spec(f"s3://{s3_server.bucket}/runs", workers=1, reference=str(tmp_path / "ref.json"))
    analyzed = analyze_model(spec.model, spec.platform, spec.training.precision.compute)  # steps 1, 3, 4: real
    planned = plan_for_spec(spec, analyzed.structure)
    optimized = optimize_for_spec(spec, analyzed.structure, planned)
    ctx = RunContext.create(spec)
    ctx.begin_attempt()

    needs = {"analyzed": analyzed, "planned": planned, "optimized": optimized}
    monkeypatch.setenv("DAY0_TRIAL_FAULTS", '{"crash_at_step": 7}')  # reaches the Ray Train worker
    # the same run (its folder, its checkpoints) with no recovery in Ray Train: the crash ends the attempt
    no_retry = ctx.model_copy(
        update={"spec": spec.model_copy(update={"trial": spec.trial.model_copy(update={"max_failures": 0})})}
    )
    with pytest.raises(TrialTrainingError, match=r"injected crash at step 7.*rerun the same spec to resume"):
        TASKS["trial"].fn(no_retry, **needs)
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert any("/trial/checkpoints/candidate/step_000005/model.pt" in k for k in keys), keys

    monkeypatch.setenv("DAY0_TRIAL_FAULTS", '{"step_delay_s": 0.01}')  # harmless: shows up in the notes
    ctx.begin_attempt()
    result = TASKS["trial"].fn(ctx, **needs)
    [run] = result.runs
    assert run.resumed_from_step == 5 and run.steps_executed == 7 < spec.trial.steps
    assert result.alignment.passed, result.alignment.failures
    assert "fault drill: hooks were active in the candidate: TrialFaults(step_delay_s=0.01)" in result.notes
    assert ctx.store.exists(ctx.key("trial", "result.json")) and ctx.store.exists(ctx.key("trial", "loss.png"))
    stored = json.loads(ctx.store.get_bytes(ctx.key("trial", "result.json")))
    assert stored["runs"][0]["steps_executed"] == 7 and stored["verdict"] == "pass"


class _Stopped(BaseException):
    """What a SIGTERM handler that is not KeyboardInterrupt raises (Prefect's: TerminationSignal)."""


def test_sigterm_ends_a_wait_inside_ray_at_once_as_an_interrupt(local_ray) -> None:
    """Ray's signal check in `ray.get` drops any exception but KeyboardInterrupt and SystemExit: a run
    terminated while its trial trained went on training (in CI, over 120 s after SIGTERM)."""
    import os
    import signal
    import threading

    import ray

    from day0.backends.local.ray import interruptible

    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    def sleep(seconds: float) -> None:  # nested: Ray's workers cannot import a test module
        time.sleep(seconds)

    sleeper = ray.remote(sleep).options(num_cpus=0)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for wrapped in (False, True):
            ref = sleeper.remote(12)
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
            t0 = time.monotonic()
            if wrapped:
                with pytest.raises(_Stopped) as stopped, interruptible():
                    ray.get(ref)
                assert time.monotonic() - t0 < 6, "the wait went on after SIGTERM"
                # Ray ended its wait with its own KeyboardInterrupt; the handler's exception comes out after it
                assert isinstance(stopped.value.__cause__, KeyboardInterrupt), repr(stopped.value.__cause__)
                assert signal.getsignal(signal.SIGTERM) is stop  # put back
                ray.cancel(ref, force=True)
            else:  # what `interruptible` is for; should a Ray release change it, this fails and says so
                with pytest.raises(SystemError) as held:  # raised when the wait ends, caused by the handler's
                    ray.get(ref)
                assert isinstance(held.value.__cause__ or held.value.__context__, _Stopped)
                assert time.monotonic() - t0 > 10, "Ray now ends its wait on any exception a handler raises"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_interruptible_converts_only_a_python_handler_of_the_main_thread() -> None:
    """Inside, the handler's own exception becomes KeyboardInterrupt (caused by it) and comes out again
    once the body is over, whether the body raised or not; a KeyboardInterrupt passes as it is; the default
    disposition (the process ends) and a call from another thread are left alone."""
    import signal
    import threading

    from day0.backends.local.ray import interruptible

    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(_Stopped) as stopped, interruptible():
            converting = signal.getsignal(signal.SIGTERM)
            assert callable(converting) and converting is not stop
            with pytest.raises(KeyboardInterrupt) as raised:
                converting(signal.SIGTERM, None)
            assert isinstance(raised.value.__cause__, _Stopped)
            # the body goes on (a wait that ended by itself, the interrupt held): it is raised at the end
        assert stopped.value is raised.value.__cause__ and stopped.value.__cause__ is None
        with pytest.raises(_Stopped) as stopped, interruptible():
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the KeyboardInterrupt ends the body
        assert isinstance(stopped.value.__cause__, KeyboardInterrupt)
        assert signal.getsignal(signal.SIGTERM) is stop
        interrupt = KeyboardInterrupt("Ctrl-C")

        def interrupted(signum: int, frame: object) -> None:
            raise interrupt

        signal.signal(signal.SIGTERM, interrupted)
        with interruptible(), pytest.raises(KeyboardInterrupt) as raised:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert raised.value is interrupt and raised.value.__cause__ is None
        signal.signal(signal.SIGTERM, stop)
        seen = []

        def in_a_thread() -> None:
            with interruptible():
                seen.append(signal.getsignal(signal.SIGTERM))

        worker = threading.Thread(target=in_a_thread)
        worker.start()
        worker.join()
        assert seen == [stop], "another thread cannot set a handler: it leaves the main thread's alone"
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with interruptible():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
