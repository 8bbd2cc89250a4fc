"""DAY0_CLUSTERS_DIR: a mounted directory (the Helm chart's cluster-spec ConfigMap) searched before
configs/clusters when a spec names its cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from day0.errors import SpecError
from day0.spec.pipeline import spec_from_dict
from tests.fixtures.paths import REPO

MINIMAL = {"metadata": {"name": "t"}, "model": "tiny-deepseek-v3", "platform": "cpu"}


def _pool(name: str, nodes: int) -> dict[str, object]:
    return {
        "name": name,
        "accelerator": {"resource": "nvidia.com/gpu", "per_node": 8, "memory_gib": 80},
        "nodes": nodes,
    }


def _write(folder: Path, name: str, pools: list[dict[str, object]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({"backend": "kuberay", "node_pools": pools}))


def test_a_mounted_cluster_wins_over_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "gpu-multinode", [_pool("mounted", 3)])  # same name as configs/clusters/gpu-multinode.yaml
    monkeypatch.setenv("DAY0_CLUSTERS_DIR", str(tmp_path))
    spec = spec_from_dict({**MINIMAL, "cluster": "gpu-multinode"})
    assert [(p.name, p.nodes) for p in spec.cluster.node_pools] == [("mounted", 3)]


def test_names_missing_there_still_resolve_in_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "only-here", [_pool("a", 1)])
    monkeypatch.setenv("DAY0_CLUSTERS_DIR", str(tmp_path))
    assert spec_from_dict({**MINIMAL, "cluster": "local"}).cluster.backend == "local"
    assert spec_from_dict({**MINIMAL, "cluster": "only-here"}).cluster.node_pools[0].name == "a"


def test_unset_means_configs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "gpu-multinode", [_pool("mounted", 3)])
    monkeypatch.delenv("DAY0_CLUSTERS_DIR", raising=False)
    pools = spec_from_dict({**MINIMAL, "cluster": "gpu-multinode"}).cluster.node_pools
    assert {p.name for p in pools} == {"h100-fixed", "cloud-elastic"}


def test_an_unknown_name_lists_both_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "from-helm", [_pool("a", 1)])
    monkeypatch.setenv("DAY0_CLUSTERS_DIR", str(tmp_path))
    with pytest.raises(SpecError) as err:
        spec_from_dict({**MINIMAL, "cluster": "nope"})
    text = str(err.value)
    assert "unknown cluster 'nope'" in text and str(tmp_path) in text
    assert "from-helm" in text and "gpu-multinode" in text  # known names from both directories


def test_a_bad_mounted_file_is_an_error_naming_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "broken", [{"name": "p", "accelerator": {"per_node": 8, "memory_gib": 80}}])  # no size
    monkeypatch.setenv("DAY0_CLUSTERS_DIR", str(tmp_path))
    with pytest.raises(SpecError) as err:
        spec_from_dict({**MINIMAL, "cluster": "broken"})
    assert "cluster.node_pools.0" in str(err.value) and "exactly one of 'nodes'" in str(err.value)


def test_a_fresh_process_reads_it_from_the_environment(tmp_path: Path) -> None:
    """A fresh process (as a flow-run pod starts) sees the mounted pool sizes."""
    _write(tmp_path / "mounted", "gpu-multinode", [_pool("mounted", 7)])
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**MINIMAL, "cluster": "gpu-multinode"}))
    env = {**os.environ, "DAY0_CLUSTERS_DIR": str(tmp_path / "mounted")}
    cmd = [
        sys.executable,
        "-c",
        "from day0.spec.pipeline import load_spec; import sys; "
        "print(load_spec(sys.argv[1]).cluster.node_pools[0].nodes)",
        str(spec),
    ]
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "7"
