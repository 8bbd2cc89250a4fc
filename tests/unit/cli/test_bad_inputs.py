"""Bad inputs as an adversarial user gives them (issue 17), through real `python -m cli` subprocesses.

Each row: the command, the files it reads, its environment, the exit code (2 bad input, 1 a
failure while running), and words the one message must hold. Every row also asserts that no
traceback reaches the user, that the message is short (values are never echoed unbounded), and
that nothing was written to the row's store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fixtures.cli import day0
from tests.fixtures.paths import REPO

TINY = json.loads((REPO / "configs" / "models" / "tiny-deepseek-v3" / "config.json").read_text())
SPEC = "metadata: {{name: bad}}\nmodel: {model}\nplatform: {platform}\nstorage: {storage}\n"


def spec(
    model: str = "tiny-deepseek-v3", platform: str = "cpu", storage: str = "file://{tmp}/store", extra: str = ""
) -> str:
    return SPEC.format(model=model, platform=platform, storage=storage) + extra


def config(**changes: object) -> str:
    return json.dumps({**TINY, **changes})


# 9 levels of 9 aliases: 9^9 strings once expanded, from a few hundred bytes.
BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    + "metadata: {name: *i}\n"
)
S3_DOWN = {
    "DAY0_STORE_ENDPOINT_URL": "http://127.0.0.1:9",
    "DAY0_STORE_ACCESS_KEY_ID": "k",
    "DAY0_STORE_SECRET_ACCESS_KEY": "s",
    "AWS_MAX_ATTEMPTS": "1",
}


@dataclass
class Case:
    id: str
    argv: list[str]
    exit_code: int
    words: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    # --- files that are not YAML text --------------------------------------------------------------
    Case(
        "non-utf8-spec-validate",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["s.yaml", "not UTF-8", "0xff"],
        {"s.yaml": b"metadata: {name: \xff}\n"},
    ),
    Case("non-utf8-spec-run", ["run", "{tmp}/s.yaml"], 2, ["not UTF-8"], {"s.yaml": b"\xfe\xff"}),
    Case("non-utf8-spec-plan", ["plan", "{tmp}/s.yaml"], 2, ["not UTF-8"], {"s.yaml": b"\xfe\xff"}),
    Case(
        "non-utf8-platform",
        ["analyze", "tiny-deepseek-v3", "--platform", "{tmp}/p.yaml"],
        2,
        ["p.yaml", "not UTF-8"],
        {"p.yaml": b"name: \xc3\x28\n"},
    ),
    Case("dir-as-spec-validate", ["validate", "{tmp}/d"], 2, ["is a directory"], {"d/x": ""}),
    Case("dir-as-spec-run", ["run", "{tmp}/d"], 2, ["is a directory"], {"d/x": ""}),
    Case("dir-as-spec-plan", ["plan", "{tmp}/d"], 2, ["is a directory"], {"d/x": ""}),
    Case(
        "dir-as-platform",
        ["analyze", "tiny-deepseek-v3", "--platform", "{tmp}/p.yaml"],
        2,
        ["p.yaml", "is a directory"],
        {"p.yaml/x": ""},
    ),
    Case("empty-spec", ["validate", "{tmp}/s.yaml"], 2, ["is empty"], {"s.yaml": ""}),
    Case("empty-spec-run", ["run", "{tmp}/s.yaml"], 2, ["is empty"], {"s.yaml": "# nothing\n"}),
    Case("missing-spec", ["validate", "{tmp}/nope.yaml"], 2, ["nope.yaml", "file not found"]),
    # --- YAML that costs or hides ------------------------------------------------------------------
    Case(
        "alias-bomb-validate",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["YAML nodes", "DAY0_LIMITS_MAX_YAML_NODES"],
        {"s.yaml": BOMB},
    ),
    Case("alias-bomb-run", ["run", "{tmp}/s.yaml"], 2, ["YAML nodes"], {"s.yaml": BOMB}),
    Case(
        "recursive-alias",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["recursive alias"],
        {"s.yaml": "metadata: &m {name: x, labels: *m}\n"},
    ),
    Case(
        "duplicate-key",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["duplicate key 'platform'", "line 5"],
        {"s.yaml": spec() + "platform: h100\n"},
    ),
    Case(
        "size-limit",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["bytes; the limit is 200", "DAY0_LIMITS_MAX_FILE_BYTES"],
        {"s.yaml": spec() + "# padding\n" * 30},
        {"DAY0_LIMITS_MAX_FILE_BYTES": "200"},
    ),
    *(
        Case(
            f"over-prefect-parameter-limit-{cmd}",
            [cmd, "{tmp}/s.yaml"],
            2,
            ["524288 bytes", "Prefect"],
            {"s.yaml": spec().replace("{name: bad}", "{name: bad, labels: {a: " + "x" * 600_000 + "}}")},
            {"DAY0_LIMITS_MAX_FILE_BYTES": "2000000"},
        )
        for cmd in ("validate", "run")
    ),
    # --- numbers: strict, and plausible ------------------------------------------------------------
    Case(
        "bool-as-int",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["training.seq_len", "integer", "True"],
        {"s.yaml": spec(extra="training: {seq_len: true}\n")},
    ),
    Case(
        "string-as-int",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["trial.steps", "integer"],
        {"s.yaml": spec(extra="trial: {steps: '40'}\n")},
    ),
    Case(
        "zero-experts-analyze",
        ["analyze", "{tmp}/m"],
        2,
        ["n_routed_experts", "from 1 to"],
        {"m/config.json": config(n_routed_experts=0)},
    ),
    Case(
        "zero-experts-validate",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["n_routed_experts"],
        {"s.yaml": spec(model="{tmp}/m"), "m/config.json": config(n_routed_experts=0)},
    ),
    Case(
        "top-k-above-experts",
        ["analyze", "{tmp}/m"],
        2,
        ["num_experts_per_tok", "above the 8 experts"],
        {"m/config.json": config(num_experts_per_tok=9)},
    ),
    # --- issue 44: shapes transformers' forward crashed on (a reshape, a top-k, a broadcast) -------------
    Case(
        "groups-do-not-split-experts",
        ["analyze", "{tmp}/m"],
        2,
        ["n_group", "3 groups do not split the 8 experts"],
        {"m/config.json": config(n_group=3)},
    ),
    Case(
        "topk-group-above-groups",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["topk_group", "from 1 to 2"],
        {"s.yaml": spec(model="{tmp}/m"), "m/config.json": config(topk_group=3)},
    ),
    Case(
        "one-expert-groups",
        ["analyze", "{tmp}/m"],
        2,
        ["n_group", "each needs at least 2"],
        {"m/config.json": config(n_group=8, topk_group=2)},
    ),
    Case(
        "head-dim-not-rope-width",
        ["run", "{tmp}/s.yaml"],
        2,
        ["head_dim", "differs from qk_rope_head_dim 16"],
        {"s.yaml": spec(model="{tmp}/m"), "m/config.json": config(head_dim=32)},
    ),
    Case(
        "billion-layers",
        ["analyze", "{tmp}/m"],
        2,
        ["num_hidden_layers", "1000000000"],
        {"m/config.json": config(num_hidden_layers=10**9)},
    ),
    Case(
        "billion-layers-plan",
        ["plan", "{tmp}/s.yaml"],
        2,
        ["num_hidden_layers"],
        {"s.yaml": spec(model="{tmp}/m"), "m/config.json": config(num_hidden_layers=10**9)},
    ),
    Case(
        "huge-vocab-run",
        ["run", "{tmp}/s.yaml"],
        2,
        ["vocab_size"],
        {"s.yaml": spec(model="{tmp}/m"), "m/config.json": config(vocab_size=10**12)},
    ),
    Case(
        "implausible-seq-len",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["training.seq_len", "less than or equal to"],
        {"s.yaml": spec(extra="training: {seq_len: 1000000000000}\n")},
    ),
    Case(
        "implausible-trial-workers",
        ["run", "{tmp}/s.yaml"],
        2,
        ["trial.workers", "4096"],
        {"s.yaml": spec(extra="trial: {workers: 1000000}\n")},
    ),
    Case(
        "non-utf8-model-config",
        ["analyze", "{tmp}/m"],
        2,
        ["config.json", "not UTF-8"],
        {"m/config.json": b'{"model_type": "\xff"}'},
    ),
    Case("dir-as-model-config", ["analyze", "{tmp}/m"], 2, ["config.json", "not a file"], {"m/config.json/x": ""}),
    Case(
        "huge-model-config",
        ["analyze", "{tmp}/m"],
        2,
        ["config.json", "at most 1000 bytes"],
        {"m/config.json": config(padding="x" * 2000)},
        {"DAY0_LIMITS_MAX_FILE_BYTES": "1000"},
    ),
    Case("long-model-name", ["analyze", "y" * 300], 2, ["model.source", "not a directory"]),
    Case(
        "long-model-source",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["model.source", "..."],
        {"s.yaml": spec(model="x" * 100_000)},
    ),
    Case(
        "missing-model-validate",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["model.source", "not a directory"],
        {"s.yaml": spec(model="{tmp}/no-model")},
    ),
    # --- hub ids -----------------------------------------------------------------------------------
    *(
        Case(
            f"hf-id-{i}",
            ["validate", "{tmp}/s.yaml"],
            2,
            ["model.source", "hf://org/name[@revision]"],
            {"s.yaml": spec(model=f"'{bad}'")},
        )
        for i, bad in enumerate(
            [
                "hf://",
                "hf://org",
                "hf://a/b/c",
                "hf://org/na me",
                "hf://org/name@",
                "hf://../etc",
                "hf://org/a--b",
                "hf://org/x@rev/../../y",
            ]
        )
    ),
    Case("hf-id-analyze", ["analyze", "hf://a//b"], 2, ["hf://org/name[@revision]"]),
    # --- names escape configs/ ---------------------------------------------------------------------
    Case(
        "platform-dotdot",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["platform", "no path separators"],
        {"s.yaml": spec(platform="../platforms/cpu")},
    ),
    Case(
        "platform-absolute",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["platform", "inline mapping"],
        {"s.yaml": spec(platform="/etc/hosts")},
    ),
    Case(
        "cluster-dotdot",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["cluster", "no path separators"],
        {"s.yaml": spec(extra="cluster: ../clusters/local\n")},
    ),
    Case(
        "analyze-platform-dotdot",
        ["analyze", "tiny-deepseek-v3", "--platform", "../platforms/cpu"],
        2,
        ["--platform", "configs/platforms name"],
    ),
    # --- store URIs ----------------------------------------------------------------------------------
    Case(
        "store-file-root",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["storage", "filesystem root"],
        {"s.yaml": spec(storage="file:///")},
    ),
    Case(
        "store-file-root-dotdot",
        ["run", "{tmp}/s.yaml"],
        2,
        ["storage", "filesystem root"],
        {"s.yaml": spec(storage="file:///tmp/../")},
    ),
    Case(
        "store-s3-no-bucket",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["storage", "bucket"],
        {"s.yaml": spec(storage="s3:///prefix")},
    ),
    Case("store-bad-scheme", ["validate", "{tmp}/s.yaml"], 2, ["storage"], {"s.yaml": spec(storage="ftp://x/y")}),
    Case(
        "store-s3-unreachable-validate",
        ["validate", "--check-store", "{tmp}/s.yaml"],
        1,
        ["s3://bucket/x", "cannot reach bucket", "127.0.0.1:9"],
        {"s.yaml": spec(storage="s3://bucket/x")},
        S3_DOWN,
    ),
    Case(
        "store-s3-unreachable-run",
        ["run", "{tmp}/s.yaml"],
        1,
        ["cannot reach bucket", "DAY0_STORE_ENDPOINT_URL"],
        {"s.yaml": spec(storage="s3://bucket/x")},
        S3_DOWN,
    ),
    *(
        Case(
            f"store-endpoint-not-a-url-{i}",
            ["run", "{tmp}/s.yaml"],
            2,
            ["DAY0_STORE_ENDPOINT_URL", "http(s)://host"],
            {"s.yaml": spec(storage="s3://bucket/x")},
            {**S3_DOWN, "DAY0_STORE_ENDPOINT_URL": url},
        )
        for i, url in enumerate(["notaurl", "http://", "ftp://host", "http://[::1", "http://host:99999"])
    ),
    Case(
        "file-limit-beyond-its-bound",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["DAY0_LIMITS_MAX_FILE_BYTES", "less than or equal to 1073741824"],
        {"s.yaml": spec()},
        {"DAY0_LIMITS_MAX_FILE_BYTES": str(10**11)},
    ),
    Case(
        "plan-store-is-a-file",
        ["plan", "{tmp}/s.yaml"],
        1,
        ["storage file://", "is not a directory", "--out FILE"],
        {"s.yaml": spec(storage="file://{tmp}/f"), "f": "x"},
    ),
    # --- arguments -----------------------------------------------------------------------------------
    Case("only-empty", ["run", "{tmp}/s.yaml", "--only", ""], 2, ["--only", "empty selection"], {"s.yaml": spec()}),
    Case("only-commas", ["run", "{tmp}/s.yaml", "--only", " , "], 2, ["empty selection"], {"s.yaml": spec()}),
    Case(
        "only-outside-steps",
        ["run", "{tmp}/s.yaml", "--only", "trial"],
        2,
        ["--only trial", "nothing to run"],
        {"s.yaml": spec(extra="steps: [analyze]\n")},
    ),
    Case("top-negative", ["plan", "{tmp}/s.yaml", "--top", "-1"], 2, ["--top", "integer >= 1"], {"s.yaml": spec()}),
    Case("top-zero", ["plan", "{tmp}/s.yaml", "--top", "0"], 2, ["--top"], {"s.yaml": spec()}),
    Case(
        "plan-out-missing-dir",
        ["plan", "{tmp}/s.yaml", "--out", "{tmp}/no/dir/p.yaml"],
        2,
        ["--out", "does not exist"],
        {"s.yaml": spec()},
    ),
    Case(
        "plan-out-exists",
        ["plan", "{tmp}/s.yaml", "--out", "{tmp}/p.yaml"],
        2,
        ["--out", "exists", "--force"],
        {"s.yaml": spec(), "p.yaml": "mine\n"},
    ),
    Case(
        "plan-out-is-dir",
        ["plan", "{tmp}/s.yaml", "--out", "{tmp}/d", "--force"],
        2,
        ["is a directory"],
        {"s.yaml": spec(), "d/x": ""},
    ),
    # --- issue 10: refused at once, before any work ---------------------------------------------------
    Case("dev-zero-as-spec-validate", ["validate", "/dev/zero"], 2, ["/dev/zero", "not a regular file"]),
    Case("dev-zero-as-spec-run", ["run", "/dev/zero"], 2, ["/dev/zero", "not a regular file"]),
    Case(
        "yaml-nested-deeply",
        ["validate", "{tmp}/s.yaml"],
        2,
        ["s.yaml", "nests deeper than 64"],
        {"s.yaml": "metadata: " + "[" * 100 + "]" * 100 + "\n"},
    ),
    Case(
        "calibrate-more-workers-than-cpus",
        ["calibrate", "cpu", "--workers", "100000", "--store", "file://{tmp}/store"],
        2,
        ["--workers 100000", "CPU(s)", "--address"],
    ),
    Case(
        "calibrate-store-unreachable",
        ["calibrate", "cpu", "--workers", "1", "--store", "s3://bucket/x"],
        1,
        ["cannot reach bucket", "127.0.0.1:9"],
        env=S3_DOWN,
    ),
    Case(
        "calibrate-store-is-a-file",
        ["calibrate", "cpu", "--workers", "1", "--store", "file://{tmp}/f"],
        1,
        ["storage file://", "is not a directory"],
        {"f": "x"},
    ),
    Case("schema-extra-arg", ["schema", "extra"], 2, ["unrecognized arguments"]),
    Case("debug-after-command", ["schema", "--debug"], 2, ["unrecognized arguments"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_message(case: Case, tmp_path: Path) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content.replace("{tmp}", str(tmp_path)))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    start = time.monotonic()
    proc = day0(*[a.replace("{tmp}", str(tmp_path)) for a in case.argv], env=case.env, cwd=tmp_path, timeout=120)
    seconds = time.monotonic() - start
    assert proc.returncode == case.exit_code, proc.stderr[-3000:]
    for word in case.words:
        assert word in proc.stderr, f"{word!r} not in: {proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(proc.stderr) < 3000, "the message echoes an unbounded value"
    assert seconds < 60, f"refused after {seconds:.0f} s"
    assert not (tmp_path / "store").exists(), "a refused input wrote to its store"
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before, "a refused input changed or left files"


def test_file_host_form_is_a_relative_path(tmp_path: Path) -> None:
    """Documented: `file://` has no host part; `file://host/x` is the directory host/x under the cwd."""
    (tmp_path / "s.yaml").write_text(spec(storage="file://host/x"))
    proc = day0("validate", "--check-store", "s.yaml", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "file://host/x/runs/bad/" in proc.stdout


def test_piped_output_is_not_hard_wrapped(tmp_path: Path) -> None:
    """A long path stays on one line when stdout is not a terminal (no COLUMNS given)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "s.yaml").write_text(spec())
    proc = day0("validate", deep / "s.yaml", drop=["COLUMNS"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1 and str(deep / "s.yaml") in proc.stdout


_BROKEN = (
    "import sys, cli.main as m\ndef boom(args):\n    raise KeyError('a bug')\nm.cmd_schema = boom\nsys.exit(m.main())\n"
)


def test_unexpected_error_is_one_line_and_traceback_only_with_debug(tmp_path: Path) -> None:
    plain = subprocess.run(
        [sys.executable, "-c", _BROKEN, "schema"], cwd=REPO, text=True, capture_output=True, timeout=120
    )
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert "internal error" in plain.stderr and "KeyError" in plain.stderr and "--debug" in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1
    debug = subprocess.run(
        [sys.executable, "-c", _BROKEN, "--debug", "schema"], cwd=REPO, text=True, capture_output=True, timeout=120
    )
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "KeyError: 'a bug'" in debug.stderr


def test_plan_out_force_overwrites_atomically(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(spec(storage=f"file://{tmp_path}/store"))
    target = tmp_path / "p.yaml"
    target.write_text("mine\n")
    proc = day0("plan", "s.yaml", "--out", str(target), "--force", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parallel" in target.read_text() and (target.stat().st_mode & 0o777) == 0o644 & ~_umask()
    # no temp file left beside the target (the store holds `day0 plan`'s structure cache)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml", "s.yaml", "store"]


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_a_fifo_or_device_as_spec_or_platform_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO nobody writes to blocked `validate` forever; /dev/zero behind a .yaml name read until
    memory ran out (exit 1 after a minute). Both are refused before any read."""
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    for argv in (
        ["validate", str(tmp_path / "fifo.yaml")],
        ["analyze", "tiny-deepseek-v3", "--platform", str(tmp_path / "zero.yaml")],
    ):
        start = time.monotonic()
        proc = day0(*argv, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr[-2000:]
        assert time.monotonic() - start < 30 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["validate", "analyze"])
def test_a_deeply_nested_config_json_is_refused_naming_the_file(command: str, tmp_path: Path) -> None:
    """`json.loads` of 50,000 nested brackets raised RecursionError: "internal error", exit 1."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    (tmp_path / "s.yaml").write_text(spec(model=str(tmp_path / "m")))
    proc = day0(command, str(tmp_path / ("s.yaml" if command == "validate" else "m")), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "config.json" in proc.stderr and "nests deeper" in proc.stderr, proc.stderr


def test_a_corrupt_calibrated_profile_is_named_with_its_way_out(tmp_path: Path) -> None:
    """Issue 44: a corrupt store record was "internal error: JSONDecodeError", naming no file."""
    from day0.planner.profile import profile_key

    (tmp_path / "s.yaml").write_text(spec().replace("{tmp}", str(tmp_path)))
    profile = tmp_path / "store" / profile_key("cpu")
    profile.parent.mkdir(parents=True)
    profile.write_text('{"platform": "cpu", ')
    proc = day0("plan", str(tmp_path / "s.yaml"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"file://{profile} is corrupt (not JSON" in proc.stderr and "day0 calibrate cpu" in proc.stderr
    assert "Traceback" not in proc.stderr
