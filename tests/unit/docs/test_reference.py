"""docs/reference/ is generated from the code (scripts/gen_docs.py): a page that no longer matches the
code fails here naming it and the command that refreshes it, and every spec field, CLI command and
flag, `DAY0_*` variable and chart value appears in its page."""

import argparse
import re
from pathlib import Path

import pytest
import yaml

from cli.main import build_parser
from day0.spec.pipeline import PipelineSpec
from scripts import gen_docs
from tests.fixtures.paths import REPO


def test_committed_pages_match_the_code() -> None:
    stale = gen_docs.stale_pages()
    assert not stale, f"stale generated pages {stale}: run `{gen_docs.REFRESH}` and commit them"


def test_check_names_the_stale_page_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gen_docs, "REFERENCE", tmp_path)
    monkeypatch.setattr(gen_docs, "PAGES", {"settings.md": gen_docs.settings_page})
    assert gen_docs.main([]) == 0 and gen_docs.main(["--check"]) == 0
    (tmp_path / "settings.md").write_text("# hand-edited\n")
    assert gen_docs.main(["--check"]) == 1
    assert "docs/reference/settings.md is stale: run `make docs-gen`" in capsys.readouterr().err


def test_every_spec_field_has_a_row() -> None:
    page = gen_docs.spec_page()
    schema = PipelineSpec.model_json_schema()
    models = {"PipelineSpec": schema, **schema["$defs"]}
    for name, model in models.items():
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for field in model.get("properties", {}):
            assert f"| `{field}` |" in section, f"{name}.{field} has no row in the spec reference"
    assert "| `learning_rate` | number | `0.0003` | > 0, <= 1 |" in page  # type, default and bounds


def test_every_command_and_flag_appears() -> None:
    page = gen_docs.cli_page()
    commands = ["validate", "run", "analyze", "schema", "plan", "calibrate", "fetch-library", "webhook serve"]
    for command in commands:
        assert f"\n## day0 {command}\n" in page, f"`day0 {command}` has no section"

    def flags(parser: argparse.ArgumentParser) -> list[str]:
        own = [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return own + [f for s in subs for p in s.choices.values() for f in flags(p)]

    every = flags(build_parser())
    assert {"--fresh", "--only", "--check-store", "--top", "--out", "--force", "--workers", "--port"} <= set(every)
    assert all(f"`{flag}" in page for flag in every), [f for f in every if f"`{f}" not in page]


def test_every_day0_variable_the_code_reads_appears() -> None:
    page = gen_docs.settings_page()
    named = {
        var
        for folder in ("day0", "cli", "flows", "tasks")
        for path in (REPO / folder).rglob("*.py")
        for var in re.findall(r"\bDAY0_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())
    }
    assert {"DAY0_CACHE", "DAY0_LIMITS_MAX_FILE_BYTES", "DAY0_WEBHOOK_SECRET"} <= named
    missing = sorted(var for var in named if f"`{var}`" not in page)
    assert not missing, f"DAY0_* variables read by the code but not in the settings reference: {missing}"
    assert "| `DAY0_RUN_MAX_ATTEMPTS` | integer | `3` | >= 1, <= 20 |" in page


def test_chart_values_read_as_helm_docs_reads_them() -> None:
    text = """# a header comment, not a value's
# -- Replaces the name.
nameOverride: ""
image:
  # -- The image,
  # over two lines.
  repository: day0
  tag: ""
# -- Pools by name.
pools:
  gpu:
    # -- Nodes of the pool.
    nodes: 4
"""
    assert gen_docs.chart_values(text) == [
        ("nameOverride", "Replaces the name."),
        ("image.repository", "The image, over two lines."),
        ("pools", "Pools by name."),
        ("pools.gpu.nodes", "Nodes of the pool."),
    ]


def test_every_chart_value_is_documented() -> None:
    values = yaml.safe_load((REPO / "helm/day0/values.yaml").read_text())
    documented = {path for path, _ in gen_docs.chart_values((REPO / "helm/day0/values.yaml").read_text())}

    def leaves(node: object, path: str) -> list[str]:
        if isinstance(node, dict) and node and path not in documented:
            return [leaf for key, value in node.items() for leaf in leaves(value, f"{path}.{key}".lstrip("."))]
        return [path]

    undocumented = [leaf for leaf in leaves(values, "") if leaf not in documented]
    assert not undocumented, f"values without a `# --` comment (or one on a parent): {undocumented}"


def test_a_bench_without_a_figure_reads_not_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks/results.json").write_text(
        '{"machine": {"cpus": 4}, "benchmarks": {"trial": {"date": "2026-01-02T03:04:05+00:00", "results": {}},'
        ' "webhook": {"error": "Traceback ..."}}}'
    )
    monkeypatch.setattr(gen_docs, "REPO", tmp_path)
    page = gen_docs.benchmarks_page()
    assert "## trial\n\nRun on 2026-01-02." in page and "| node kill to first resumed step | not recorded |" in page
    assert "## webhook" in page and "The last run failed" in page
