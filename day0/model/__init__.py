"""What a model is, independent of any step: `source` (the one resolver of a model reference: a
configs/ name, a local folder, the hub cache), `build` (its transformers config and the architecture
on the meta device), `structure` (parameter counts and shapes), `kv_cache` (what serving keeps per
token and per sequence), `plausible` (bounds on a config's figures) and `release` (the release's own
files: tokenizer, shard headers, FP8 scales, rope context). Import each name from its module."""
