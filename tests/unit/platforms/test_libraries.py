"""Operator libraries read from the vendors' wheels: torch_npu's registry, torch's composites, the
flag-gems overlay less a vendor's exclusions, overrides; the snapshot path offline; the errors."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from cli.main import main
from day0.errors import UsageError
from day0.platforms.libraries import resolve
from day0.platforms.libraries.resolve import resolve_library
from day0.platforms.wheels import WheelError, WheelUnavailable
from day0.spec.cluster import LibraryOverlay, LibraryOverride, VendorLibrary
from tests.unit.platforms.conftest import BuildWheel

NPU_REGISTRY = """\
backend: NPU
supported:
  - add.Tensor
  - as_strided
  - func: clone
    op_api: true
  - matmul
symint:
  - npu_fused_thing
autograd:
  - func: _thnn_fused_gru_cell(Tensor input_gates, Tensor hx) -> (Tensor, Tensor)
custom:
  - func: npu_fused_thing(Tensor self) -> Tensor
"""
NATIVE_FUNCTIONS = """\
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
- func: as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride) -> Tensor(a)
  dispatch:
    CPU, CUDA: as_strided_tensorimpl
- func: _grouped_mm(Tensor self, Tensor mat2) -> Tensor
  dispatch:
    CompositeExplicitAutograd: _grouped_mm
    CUDA: _grouped_mm_cuda
- func: slice_scatter(Tensor self, Tensor src) -> Tensor
  dispatch:
    CompositeExplicitAutogradNonFunctional: slice_scatter
- func: matmul(Tensor self, Tensor other) -> Tensor
  variants: function, method
- func: softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor
  dispatch:
    CompositeImplicitAutograd: softmax
- func: histc(Tensor self, int bins=100) -> Tensor
  dispatch:
    CPU: histogram_histc_cpu
- func: sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
  dispatch:
    CompositeExplicitAutograd: sort
"""
REGISTRY_MEMBER = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
NATIVE_MEMBER = "torchgen/packaged/ATen/native/native_functions.yaml"


@pytest.fixture
def npu(build_wheel: BuildWheel) -> Path:
    build_wheel("torch", "9.9.0", {NATIVE_MEMBER: NATIVE_FUNCTIONS})
    return build_wheel("torch-npu", "9.9.1", {REGISTRY_MEMBER: NPU_REGISTRY}, ["torch==9.9.0.*", "numpy"])


def test_registry_and_composites_resolve_with_kinds_sources_and_provenance(npu: Path) -> None:
    library = resolve_library(VendorLibrary(package="torch-npu", version="9.9.1"))
    kinds = {op: (e.kind, e.source) for op, e in library.ops.items()}
    npu_source, composite = "torch-npu 9.9.1", "torch 9.9.0 composite"
    assert kinds["aten::add.Tensor"] == ("vendor_kernel", npu_source)
    assert kinds["aten::as_strided"] == ("vendor_kernel", npu_source)  # a bare name: the default overload
    assert kinds["aten::clone"] == ("vendor_kernel", npu_source)
    assert kinds["aten::_thnn_fused_gru_cell"] == ("vendor_kernel", npu_source)  # a schema
    assert kinds["npu::npu_fused_thing"] == ("vendor_kernel", npu_source)  # custom, also under symint
    assert "aten::npu_fused_thing" not in kinds
    assert kinds["aten::_grouped_mm"] == ("default_backend", composite)
    assert kinds["aten::slice_scatter"] == ("default_backend", composite)
    assert kinds["aten::softmax.int"] == ("decomposes", composite)
    assert kinds["aten::matmul"] == ("vendor_kernel", npu_source)  # the vendor's kernel wins over the CIA
    assert library.whole_ops == ["aten::matmul"]
    assert "aten::histc" not in kinds  # a per-backend op torch_npu does not register
    assert all(e.dtypes is None for e in library.ops.values())  # registries state no dtypes
    by_package = {f.package: f for f in library.files}
    assert by_package["torch-npu"].wheel_sha256 == hashlib.sha256(npu.read_bytes()).hexdigest()
    assert by_package["torch-npu"].file == REGISTRY_MEMBER and by_package["torch-npu"].via == "wheel"
    assert by_package["torch-npu"].file_sha256 == hashlib.sha256(NPU_REGISTRY.encode()).hexdigest()
    assert by_package["torch"].file == NATIVE_MEMBER


def test_the_snapshot_serves_the_same_library_offline(npu: Path, tmp_path: Path, monkeypatch) -> None:
    assert main(["fetch-library", "torch-npu==9.9.1"]) == 0
    snapshots = tmp_path / "configs" / "platforms" / "libraries"
    assert sorted(p.name for p in snapshots.iterdir()) == ["torch-9.9.0.json", "torch-npu-9.9.1.json"]
    online = resolve_library(VendorLibrary(package="torch-npu", version="9.9.1"))
    lines = (snapshots / "torch-npu-9.9.1.json").read_text().splitlines()
    assert '"aten::add.Tensor",' in {line.strip() for line in lines}  # one op per line

    monkeypatch.setenv("DAY0_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nothing-served"))
    resolve._read.cache_clear()
    offline = resolve_library(VendorLibrary(package="torch-npu", version="9.9.1"), offline=True)
    assert offline.ops == online.ops and offline.whole_ops == online.whole_ops
    assert {f.via for f in offline.files} == {"snapshot"}
    assert [f.wheel_sha256 for f in offline.files] == [f.wheel_sha256 for f in online.files]


def test_unknown_package_version_and_registryless_wheel_are_refused(build_wheel: BuildWheel) -> None:
    unknown = r"platform\.operator_library\.package: unknown package 'torch-xpu'.*torch-npu"
    with pytest.raises(UsageError, match=unknown):
        resolve_library(VendorLibrary(package="torch-xpu", version="1.0"))
    unserved = r"platform\.operator_library\.version: torch-npu 0\.0\.1.*day0 fetch-library torch-npu==0\.0\.1"
    with pytest.raises(WheelUnavailable, match=unserved):
        resolve_library(VendorLibrary(package="torch-npu", version="0.0.1"))
    build_wheel("torch-npu", "9.9.2", {"torch_npu/__init__.py": ""}, ["torch==9.9.0.*"])
    with pytest.raises(WheelError, match=re.escape(f"has no {REGISTRY_MEMBER}")):
        resolve_library(VendorLibrary(package="torch-npu", version="9.9.2"))


FLAG_GEMS_INIT = """\
import triton  # never imported by day0: read with ast

_FULL_CONFIG = (
    ("add.Tensor", add),
    ("sort", sort),
    ("sort.stable", sort_stable),
    ("histc", histc, lambda: torch_ge("2.4")),
    ("_flash_attention_forward", flash_attention_forward),
    ("cumsum", cumsum),
)
"""


@pytest.fixture
def gems(npu: Path, build_wheel: BuildWheel) -> Path:
    return build_wheel(
        "flag-gems",
        "9.0.0",
        {
            "flag_gems/__init__.py": FLAG_GEMS_INIT,
            "flag_gems/runtime/backend/_ascend/__init__.py": 'CUSTOMIZED_UNUSED_OPS = ("sort", "cumsum")\n',
            "flag_gems/runtime/backend/_metax/__init__.py": "CUSTOMIZED_UNUSED_OPS = ()\n",
            "flag_gems/runtime/backend/_metax/op_black_list.yaml": (
                "unsupported_operators:\n  - name: flash_attention_forward\n    reason: All dtypes failed\n"
            ),
        },
    )


def test_overlay_adds_its_kernels_less_the_vendors_exclusions(gems: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve, "installed_torch", lambda: "9.9.0")  # no base: the installed torch's composites
    overlay = LibraryOverlay(overlay="flag-gems", version="9.0.0", vendor="ascend")
    ascend = resolve_library(VendorLibrary(package="torch-npu", version="9.9.1", overlays=[overlay]))
    assert ascend.ops["aten::histc"].source == "flag-gems 9.0.0 (ascend)"
    assert ascend.ops["aten::add.Tensor"].source == "flag-gems 9.0.0 (ascend)"  # registered over the base
    assert ascend.ops["aten::sort"].source == "torch 9.9.0 composite"  # excluded: the composite stays
    assert "aten::cumsum" not in ascend.ops
    assert ascend.ops["aten::sort.stable"].source == "flag-gems 9.0.0 (ascend)"  # its function is sort_stable
    assert ascend.ops["aten::_flash_attention_forward"].kind == "vendor_kernel"
    metax = resolve_library(VendorLibrary(overlays=[overlay.model_copy(update={"vendor": "metax"})]))
    assert "aten::_flash_attention_forward" not in metax.ops  # black-listed by its function's name
    assert metax.ops["aten::sort.stable"].source == "flag-gems 9.0.0 (metax)"
    assert "aten::matmul" not in metax.ops or metax.ops["aten::matmul"].kind == "decomposes"
    assert any(n.startswith("base unread") for n in metax.notes)
    files = {f.file for f in metax.files if f.package == "flag-gems"}
    assert files == {
        "flag_gems/__init__.py",
        "flag_gems/runtime/backend/_metax/__init__.py",
        "flag_gems/runtime/backend/_metax/op_black_list.yaml",
    }


def test_unknown_overlay_vendor_lists_the_backends(gems: Path) -> None:
    overlay = LibraryOverlay(overlay="flag-gems", version="9.0.0", vendor="nvidia")
    with pytest.raises(UsageError, match=r"overlays\[0\]\.vendor: .*'nvidia'.*\['ascend', 'metax'\]"):
        resolve_library(VendorLibrary(package="torch-npu", version="9.9.1", overlays=[overlay]))
    with pytest.raises(UsageError, match=r"overlays\[0\]\.overlay: unknown package 'gems'"):
        resolve_library(VendorLibrary(overlays=[overlay.model_copy(update={"overlay": "gems"})]))


def test_overrides_state_dtypes_or_withdraw_with_their_reason(npu: Path) -> None:
    overrides = [
        LibraryOverride(op="aten::histc", dtypes=["fp32"], reason="vendor doc X"),
        LibraryOverride(op="aten::clone", available=False, reason="broken in test"),
    ]
    library = resolve_library(VendorLibrary(package="torch-npu", version="9.9.1", overrides=overrides))
    histc = library.ops["aten::histc"]
    assert histc.dtypes == ["fp32"] and histc.source == "override: vendor doc X"
    assert "aten::clone" not in library.ops and library.withdrawn == {"aten::clone": "override: broken in test"}


def test_spec_needs_a_base_or_overlays() -> None:
    with pytest.raises(ValueError, match="package: required unless overlays"):
        VendorLibrary()
    with pytest.raises(ValueError, match="version: required with package"):
        VendorLibrary(package="torch-npu")


def test_fetch_library_refuses_what_it_cannot_read(served: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch-library", "torch-xpu==1.0"]) == 2
    assert "unknown package 'torch-xpu'" in capsys.readouterr().err
    assert main(["fetch-library", "torch-npu"]) == 2
    assert "expected PACKAGE==VERSION" in capsys.readouterr().err
    assert main(["fetch-library", "torch-npu==0.0.1"]) == 2  # served nothing: no snapshot is written
    assert "torch-npu 0.0.1 is neither cached nor served" in capsys.readouterr().err
    assert not (served.parent / "configs").exists()
