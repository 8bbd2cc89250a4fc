"""Online, a hub source's shard headers are read by HTTP range requests, never its weight data: a tiny
FP8 release served by a local hub-style server (tests.fixtures.hub_server; no network), a truncated
shard refused naming the file, and a hub that does not answer said so as a check not made."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch

from day0.errors import ModelError
from day0.model.build import build_meta_model, load_hf_config
from day0.model.release import ReleaseCheck, check_release
from day0.model.source import ResolvedModel, resolve_model_source
from day0.settings import HubSettings
from tests.fixtures.hub_server import COMMIT, hub_server
from tests.fixtures.release import add_tokenizer, make_fp8_release, read_tensors, save_model

REPO = "day0-test/tiny-fp8"
INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    plain = save_model(root / "plain", "tiny-deepseek-v3", max_shard_size="1MB")
    add_tokenizer(plain)
    return make_fp8_release(root / "fp8", plain)


def check(resolved: ResolvedModel, online: bool = True) -> ReleaseCheck:
    return check_release(resolved, build_meta_model(load_hf_config(resolved), resolved.source, "bf16"), online)


def test_online_shard_headers_are_read_by_range_requests(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    with hub_server({REPO: built}, monkeypatch) as hub:
        resolved = resolve_model_source(f"hf://{REPO}@main", HubSettings(cache_dir=cache, offline=False))
        result = check(resolved)
    assert result.problems == [] and result.not_checked == [], result.report_lines()
    shards = sorted(set(json.loads((built / INDEX).read_text())["weight_map"].values()))
    w = result.weights
    assert w is not None and w.headers_read and sorted(w.shards) == shards and len(shards) == 3
    fp8 = [t for t in read_tensors(built).values() if t.dtype == torch.float8_e4m3fn]
    assert w.bytes_by_dtype["F8_E4M3"] == sum(t.numel() for t in fp8)
    assert [f.describe() for f in w.fp8] == [
        f"block-scaled 128x128 F8_E4M3 with `weight_scale_inv` ({len(fp8)} tensors)"
    ]
    assert result.tokenizer is not None and result.tokenizer.round_trip
    assert any("range requests" in n for n in result.notes)
    # headers only: every shard GET asked for a range within its first 100 kB, and none reached the cache
    for shard in shards:
        assert (built / shard).stat().st_size > 200_000
        assert all(r is not None for f, r in hub.gets if f == shard)
        assert 0 < hub.bytes_sent(shard) <= 100_001
    assert not list(cache.rglob("*.safetensors")) and list(cache.rglob(INDEX))


def test_a_truncated_shard_online_is_refused_naming_the_file(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    broken = Path(shutil.copytree(built, tmp_path / "broken"))
    shard = sorted(broken.glob("*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:-1000])
    with hub_server({REPO: broken}, monkeypatch):
        resolved = resolve_model_source(f"hf://{REPO}@main", HubSettings(cache_dir=tmp_path / "c", offline=False))
        with pytest.raises(ModelError) as caught:
            check(resolved)
    message = str(caught.value)
    assert caught.value.field == shard.name and f"{REPO}@{COMMIT}/{shard.name}" in message
    assert "more bytes than the file holds (truncated?)" in message


def test_a_hub_that_does_not_answer_is_a_check_not_made(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    cached = built.parent / "config-only"
    cached.mkdir(exist_ok=True)
    for name in ("config.json", INDEX):
        (cached / name).write_bytes((built / name).read_bytes())
    config = json.loads((cached / "config.json").read_text())
    resolved = ResolvedModel(source=f"hf://{REPO}", directory=cached, config=config, repo_id=REPO, revision="main")
    online = check(resolved)
    assert online.problems == [] and online.weights is not None and not online.weights.headers_read
    assert any("the hub did not answer for day0-test/tiny-fp8" in n for n in online.not_checked), online.not_checked
    offline = check(resolved, online=False)
    assert any("the hub is offline" in n and "range requests" in n for n in offline.not_checked), offline.not_checked
