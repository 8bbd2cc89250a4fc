"""Step 2 on a spec alone (no run context, no backend, no torch): the tolerance policy the spec's
`validation:` section names can be applied here. `day0 validate` and `day0 run` call it before
anything starts (`cli.preflight`), so validate refuses what run would."""

from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.msprobe import load_standards

__all__ = ["check_tolerance"]


def check_tolerance(validation: ValidationSpec) -> None:
    """msprobe's standards at `validation.msprobe_version` are cached or snapshotted, when asked for;
    a `UsageError` naming the field and the command that caches them otherwise."""
    if validation.tolerance == "msprobe":
        load_standards(validation.msprobe_version)
