"""The spec a user writes: `pipeline` (the `AdaptationPipeline` document, `load_spec`), `base` (the
user-model base and shared bounds), `cluster` (platforms and clusters), `planner` (steps 3-4's
sections), `serving` (step 6's section) and `checks` (a valid spec against its model and engines).
Import each name from its module; this package re-exports nothing."""
