"""`run_matrix`: every fault through every layer that applies, and the clean runs that show the
false-alarm rate (the clean platform's per-op check, clean trainings over the seeds and with two
workers, each performance baseline timed against itself)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from day0.platforms.kernels import Platform
from day0.steps.trial.loop import LoopStep
from testsupport.fault_matrix.catalogue import Fault
from testsupport.fault_matrix.layers import convergence, numerical, performance
from testsupport.fault_matrix.plugins import plugin_platform
from testsupport.fault_matrix.results import FaultMatrix, MatrixRow
from testsupport.fault_matrix.training import candidate_config, loop_config, train

__all__ = ["SEEDS", "run_matrix"]

SEEDS = (0, 1, 2)


def _row(
    fault: Fault,
    seed: int,
    reference: list[LoopStep],
    clean_failing: set[str],
) -> MatrixRow:
    detections = []
    if fault.kernel:
        detections.append(numerical(plugin_platform(fault.name), clean_failing))
    history = train(candidate_config(seed, fault), fault.workers, fault.training)
    detections.append(convergence(reference, history))
    if fault.baseline_kernel:
        detections.append(performance(plugin_platform(fault.name), plugin_platform(f"{fault.name}-baseline")))
    return MatrixRow(fault=fault.name, expected=fault.layer, detections=detections)


def run_matrix(
    faults: list[Fault], seeds: Iterable[int] = SEEDS, progress: Callable[[str], None] | None = None
) -> FaultMatrix:
    """Every fault through every layer that applies, and clean runs over `seeds`. The kernels of
    `faults` must be installed (`install_plugins`)."""
    say, t0 = progress or (lambda _m: None), time.perf_counter()
    seeds = list(seeds)
    clean_report = numerical(Platform("cpu"), set())
    clean_failing = set((clean_report.localised_at or "").split(", ")) - {""}
    clean: list[MatrixRow] = [
        MatrixRow(fault="clean platform, step 2 per-op check", expected=None, detections=[clean_report])
    ]
    references: dict[int, list[LoopStep]] = {}
    for seed in seeds:
        say(f"clean seed {seed}")
        references[seed] = train(loop_config(seed))
        cand = train(candidate_config(seed))
        clean.append(
            MatrixRow(
                fault=f"clean, seed {seed} (bf16 x1)", expected=None, detections=[convergence(references[seed], cand)]
            )
        )
    if any(f.workers == 2 for f in faults):
        say("clean 2 workers")
        clean.append(
            MatrixRow(
                fault="clean, seed 0 (bf16 x2, gloo all-reduce)",
                expected=None,
                detections=[convergence(references[seeds[0]], train(candidate_config(seeds[0]), 2))],
            )
        )
    for f in faults:
        if f.baseline_kernel:
            say(f"performance: {f.name}'s baseline kernel against itself")
            baseline = plugin_platform(f"{f.name}-baseline")
            clean += [
                MatrixRow(
                    fault=f"clean, repeat {i} ({f.name}'s baseline kernel timed against itself)",
                    expected=None,
                    detections=[performance(baseline, plugin_platform(f"{f.name}-baseline"))],
                )
                for i in range(len(seeds))
            ]
    rows = []
    for f in faults:
        say(f"fault {f.name}")
        rows.append(_row(f, seeds[0], references[seeds[0]], clean_failing))
    return FaultMatrix(rows=rows, clean=clean, seconds=time.perf_counter() - t0)
