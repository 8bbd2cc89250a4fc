"""Run step 5 (trial training) for a spec, outside Prefect: the entrypoint Ray jobs execute.

    python -m day0.steps.trial configs/pipelines/tiny-local.yaml
    python -m day0.steps.trial SPEC --steps 20 --workers 2 --address ray://head:10001

Writes result.json, result.md and loss.png under the spec's store (runs/<name>/<run id>/trial/),
keeps checkpoints beside them, and resumes from them when run again. Exit 0 when the verdict passes
(pass or warn), 1 when not. Standalone, it resolves the model itself and reports no memory estimate
(the pipeline's task passes step 1's model and step 3's cost model).
"""

from __future__ import annotations

import argparse
import sys

from day0.errors import Day0Error


def main(argv: list[str] | None = None) -> int:
    from day0.model.source import resolve_model
    from day0.runs.context import RunContext
    from day0.spec.pipeline import load_spec
    from day0.steps.trial.train import run_trial

    parser = argparse.ArgumentParser(prog="python -m day0.steps.trial", description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--steps", type=int, help="override trial.steps")
    parser.add_argument("--workers", type=int, help="override trial.workers")
    parser.add_argument("--address", help="Ray cluster address (default: the spec's, else a local Ray)")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        updates = {k: v for k, v in {"steps": args.steps, "workers": args.workers}.items() if v}
        spec = spec.model_copy(update={"trial": spec.trial.model_copy(update=updates)})
        ctx = RunContext.create(spec)
        store = ctx.store
        result = run_trial(
            spec,
            resolve_model(spec.model),
            checkpoint_uri=store.url(ctx.key("trial", "checkpoints")),
            ray_address=args.address,
            progress=lambda msg: print(f"trial: {msg}", flush=True),
        )
    except Day0Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for name, data in result.files().items():
        store.put_bytes(ctx.key("trial", name), data)
    markdown = result.to_markdown()
    store.put_text(ctx.key("trial", "result.md"), markdown, "text/markdown")
    print(markdown)
    print(store.put_json(ctx.key("trial", "result.json"), result.model_dump(mode="json")))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
