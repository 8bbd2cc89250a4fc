"""`day0 webhook serve` refuses to start, with exit 2 and the setting or file named, without a secret of
at least 16 bytes (an empty one included: what a Helm Secret made from an unset variable holds),
without PREFECT_API_URL (it never starts a Prefect server of its own), and with a watch config or
spec template that is not one (missing, not YAML, duplicate keys, a template that is no mapping)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cli import day0
from tests.fixtures.paths import REPO

SECRET = "a-secret-of-24-bytes-xyz"
PREFECT = "http://127.0.0.1:9/api"  # nothing listens: none of these gets as far as calling it
SET = {"DAY0_WEBHOOK_SECRET": SECRET, "PREFECT_API_URL": PREFECT}


SERVE = ("webhook", "serve", "--port", "0")
UNSET = ("DAY0_WEBHOOK_SECRET", "PREFECT_API_URL")  # the test's own, or none


def test_no_secret_is_a_usage_error() -> None:
    proc = day0(*SERVE, env={"PREFECT_API_URL": PREFECT}, drop=UNSET, timeout=60)
    assert proc.returncode == 2 and "DAY0_WEBHOOK_SECRET" in proc.stderr


@pytest.mark.parametrize("secret", ["", "fifteen-bytes!!", "ü" * 7])
def test_an_empty_or_short_secret_is_a_usage_error(secret: str) -> None:
    proc = day0(*SERVE, env={"DAY0_WEBHOOK_SECRET": secret, "PREFECT_API_URL": PREFECT}, drop=UNSET, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "DAY0_WEBHOOK_SECRET" in proc.stderr and "at least 16 bytes" in proc.stderr, proc.stderr
    assert not secret or secret not in proc.stderr


def test_no_prefect_api_url_is_a_usage_error_and_starts_no_server() -> None:
    proc = day0(*SERVE, env={"DAY0_WEBHOOK_SECRET": SECRET}, drop=UNSET, timeout=60)
    assert proc.returncode == 2 and "PREFECT_API_URL" in proc.stderr, proc.stderr
    assert "temporary server" not in proc.stdout + proc.stderr


def test_a_bad_watch_config_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "watch.yaml").write_text("watch: {orgs: [a], colours: [red]}\ntemplate: nowhere.yaml\n")
    proc = day0(*SERVE, "--watch", tmp_path / "watch.yaml", env=SET, drop=UNSET, timeout=60)
    assert proc.returncode == 2 and "watch.colours" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("watch", "template", "expect"),
    [
        (None, None, "file not found"),
        ("watch: {orgs: [a]\ntemplate: t.yaml\n", "{}", "not valid YAML"),
        ("watch: {orgs: [a]}\nwatch: {orgs: [b]}\ntemplate: t.yaml\n", "{}", "duplicate key 'watch'"),
        ("watch: {orgs: [a]}\ntemplate: t.yaml\n", "- a\n- list\n", "expected a spec mapping"),
        ("watch: {orgs: [a]}\ntemplate: t.yaml\n", "model: [1, 2]\n", "model: expected a mapping"),
        ("watch: {orgs: [a]}\ntemplate: t.yaml\n", "a: 1\na: 2\n", "duplicate key 'a'"),
    ],
    ids=["missing", "not-yaml", "duplicate-key", "template-list", "template-model", "template-duplicate"],
)
def test_a_bad_watch_file_or_template_exits_2(tmp_path: Path, watch: str | None, template: str, expect: str) -> None:
    if watch is not None:
        (tmp_path / "watch.yaml").write_text(watch)
        (tmp_path / "t.yaml").write_text(template)
    proc = day0(*SERVE, "--watch", tmp_path / "watch.yaml", env=SET, drop=UNSET, timeout=60)
    assert proc.returncode == 2 and expect in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"PREFECT_API_URL": "notaurl"}, "PREFECT_API_URL: expected http(s)://host"),
        ({"PREFECT_API_URL": "http://[::1/api"}, "Invalid IPv6 URL (check PREFECT_API_URL"),
        ({"DAY0_WEBHOOK_MAX_BODY_BYTES": "1e11"}, "DAY0_WEBHOOK_MAX_BODY_BYTES"),
        ({"DAY0_WEBHOOK_MAX_BODY_BYTES": str(10**11)}, "DAY0_WEBHOOK_MAX_BODY_BYTES: Input should be less than"),
        ({"DAY0_WEBHOOK_STORE_THREADS": "100000"}, "DAY0_WEBHOOK_STORE_THREADS"),
        ({"DAY0_WEBHOOK_SECRET": "a-secret-of\n24-bytes-xyz"}, "DAY0_WEBHOOK_SECRET: holds a control character"),
        ({"DAY0_WEBHOOK_SECRET": "fifteen-bytes!!\n"}, "DAY0_WEBHOOK_SECRET: must be at least 16 bytes"),
    ],
    ids=["url-no-scheme", "url-unparsable", "body-float", "body-100-gb", "threads", "secret-inner-newline", "short"],
)
def test_settings_that_can_never_work_are_refused_at_start(env: dict[str, str], expect: str) -> None:
    """Issue 44: these started and then failed every delivery (401, 503) or obeyed a typo'd limit."""
    proc = day0(*SERVE, env=SET | env, drop=UNSET, timeout=60)
    assert proc.returncode == 2 and expect in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "24-bytes" not in proc.stderr


def test_a_secret_file_s_trailing_newline_is_stripped() -> None:
    """A Secret made `kubectl create secret --from-file` ends with the file's newline; no HTTP header can
    carry one, so the receiver compares what the hub can send."""
    from day0.webhook import WebhookSettings

    settings = WebhookSettings(secret=SECRET + "\r\n")
    assert settings.secret.get_secret_value() == SECRET


@pytest.mark.parametrize(
    ("template", "expect"),
    [("/etc/passwd", "expected a YAML spec file"), ("../elsewhere/t.yaml", "outside the folders specs may come from")],
    ids=["not-yaml", "outside"],
)
def test_a_template_must_be_a_yaml_spec_beside_the_watch_file_or_in_the_spec_roots(
    tmp_path: Path, template: str, expect: str
) -> None:
    """Issue 44: the receiver accepted any file as its spec template (`template: /etc/shadow`)."""
    (tmp_path / "w").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/t.yaml").write_text("SECRET-LINE: x\n")
    (tmp_path / "w/watch.yaml").write_text(f"watch: {{orgs: [a]}}\ntemplate: {template}\n")
    roots = str(REPO / "configs")
    proc = day0(
        *SERVE, "--watch", tmp_path / "w/watch.yaml", env=SET | {"DAY0_RUN_SPEC_ROOTS": roots}, drop=UNSET, timeout=60
    )
    assert proc.returncode == 2 and expect in proc.stderr and "template" in proc.stderr, proc.stderr
    assert "SECRET-LINE" not in proc.stderr and "root:" not in proc.stderr
