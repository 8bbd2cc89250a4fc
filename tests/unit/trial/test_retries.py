"""A deterministic error is never retried (issue 42, item 3): the trial on an emulated Ascend whose
library lacks `aten::all` retried the missing kernel three times (about 70 s), then failed. On real
Ray Train workers: a missing kernel ends the run after its first attempt, naming the op; a crash
that a retry gets past is still retried."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.errors import UsageError
from day0.platforms.kernels import MissingKernelError
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.ray_train import is_deterministic
from tests.fixtures.numerics import ascend_lacking
from tests.fixtures.trial import tiny_data, tiny_loop


def test_what_a_retry_would_meet_again() -> None:
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback

    missing = MissingKernelError("ascend-910b: no kernel for aten::all at bool", "aten::all")
    assert is_deterministic(missing) and is_deterministic(UsageError("trial.dataset: no such file"))
    assert is_deterministic(UserExceptionWithTraceback(missing, "Traceback ..."))  # as Ray Train hands it over
    try:
        try:
            raise missing
        except MissingKernelError as exc:
            raise RuntimeError("the training step failed") from exc
    except RuntimeError as wrapped:
        assert is_deterministic(wrapped)
    assert not is_deterministic(RuntimeError("injected crash at step 2"))
    assert not is_deterministic(ConnectionError("node lost"))


@pytest.mark.integration
def test_a_missing_kernel_fails_at_once_and_a_crash_is_retried(local_ray, tmp_path: Path) -> None:
    from day0.steps.trial.ray_train import run_training

    lacking = tiny_loop(3, platform=ascend_lacking("aten::mm"), compute_dtype="fp32")
    run = run_training(lacking, tiny_data().tokens, name="lacking", storage_uri=f"file://{tmp_path}", max_failures=2)
    starts = [e for e in run.events if e.kind == "started" and e.rank == 0]
    assert run.error is not None and "aten::mm" in run.error, run.error
    assert "not retried" in run.error
    assert len(starts) == 1, f"{len(starts)} attempts for a missing kernel"

    crash = TrialFaults(crash_at_step=1)  # the retry resumes from step 1's checkpoint, past the crash
    run = run_training(
        tiny_loop(3, checkpoint_every=1),
        tiny_data().tokens,
        name="crash",
        storage_uri=f"file://{tmp_path}",
        max_failures=2,
        hooks=crash,
    )
    starts = [e for e in run.events if e.kind == "started" and e.rank == 0]
    assert run.error is None and len(starts) == 2, (run.error, len(starts))
