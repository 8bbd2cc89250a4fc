"""Step 1's release check at DeepSeek-V3's scale: a release laid out as DeepSeek ships it (163 shards,
FP8 e4m3 projections with a `weight_scale_inv` per 128 x 128 block, bf16 embeddings, norms and
router, the ignored multi-token-prediction layer, an 8 MiB index) written as sparse files, whose
headers are real and whose data are holes, so 670 GB of shards take a few MiB of disk; then
`check_release` on them, timed, with the meta build apart.

    python -m benchmarks.run release
"""

from __future__ import annotations

import json
import math
import struct
import tempfile
import time
from pathlib import Path

from day0.model.build import build_meta_model, load_hf_config
from day0.model.release import DTYPE_SIZES, check_release, expected_tensors
from day0.model.source import resolve_model_source
from tests.fixtures.release import BLOCK, FP8_QUANTIZATION, config_of

SHARDS = 163  # as DeepSeek-V3's release


def _layout(expected: dict[str, tuple[str, list[int]]]) -> dict[str, tuple[str, list[int]]]:
    """(dtype, shape) per tensor as DeepSeek-V3 ships them: 2-D projections in FP8 with block scales."""
    out = {}
    for name, (dtype, shape) in expected.items():
        if len(shape) == 2 and name.endswith("proj.weight"):
            out[name] = ("F8_E4M3", shape)
            out[name + "_scale_inv"] = ("F32", [math.ceil(d / BLOCK) for d in shape])
        else:
            out[name] = (dtype, shape)
    out["model.layers.61.eh_proj.weight"] = ("BF16", [7168, 14336])  # the MTP layer transformers ignores
    return out


def _write_sparse_release(root: Path, layout: dict[str, tuple[str, list[int]]]) -> int:
    names = sorted(layout)
    per, weight_map, total = math.ceil(len(names) / SHARDS), {}, 0
    for i in range(SHARDS):
        file = f"model-{i + 1:05d}-of-{SHARDS:06d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name in names[i * per : (i + 1) * per]:
            dtype, shape = layout[name]
            nbytes = math.prod(shape) * DTYPE_SIZES[dtype]
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        raw = json.dumps(header).encode()
        with (root / file).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # a hole: the data are never written
        total += offset
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return total


def run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "config.json").write_text(
            json.dumps(config_of("deepseek-v3") | {"quantization_config": FP8_QUANTIZATION})
        )
        start = time.perf_counter()
        resolved = resolve_model_source(str(root))
        meta = build_meta_model(load_hf_config(resolved), str(root), "bf16")
        build_s = time.perf_counter() - start
        expected = {
            n: (e.dtypes[0] if e.dtypes else "BF16", e.shape) for n, e in expected_tensors(meta, "BF16").items()
        }
        total = _write_sparse_release(root, _layout(expected))
        start = time.perf_counter()
        check = check_release(resolved, meta)
        check_s = time.perf_counter() - start
        weights = check.weights
        assert weights is not None and not check.problems, check.problems
        return {
            "tensors": weights.tensors,
            "shards": len(weights.shards),
            "checkpoint_gb": round(total / 1e9, 1),
            "index_mib": round((root / "model.safetensors.index.json").stat().st_size / 2**20, 1),
            "fp8": [f.describe() for f in weights.fp8],
            "ignored_on_load": weights.ignored,
            "meta_build_s": round(build_s, 2),
            "check_release_s": round(check_s, 2),
        }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
