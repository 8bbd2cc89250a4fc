"""What a delivery puts in a log line or an answer is escaped and cut: newlines cannot forge a line,
ANSI and bidi controls arrive as escapes, and a reason names at most three refs however many came."""

from __future__ import annotations

from day0.webhook.payload import HubPayload, WatchList, decide
from day0.webhook.safe import clean


def test_controls_and_bidi_are_escaped_and_long_text_is_cut() -> None:
    forged = "refs/x\n2026-01-01 INFO day0.webhook: triggered\r\x1b[31mred\u202egnp.exe\u2066\u200b\u2028\\"
    shown = clean(forged)
    assert "\n" not in shown and "\r" not in shown and "\x1b" not in shown
    assert not any(ch in shown for ch in "\u202e\u2066\u200b\u2028")
    assert "\\u000a" in shown and "\\u001b" in shown and "\\u202e" in shown and shown.endswith("\\\\")
    assert clean("é ü 中文 ok") == "é ü 中文 ok"
    cut = clean("x" * 1000, 50)
    assert cut == "x" * 50 + "...(+950 chars)"


def test_a_reason_names_few_refs_escaped() -> None:
    refs = [{"ref": f"refs/tags/v{i}\n\x1b[2J", "newSha": "a" * 40} for i in range(9000)]
    payload = HubPayload.model_validate(
        {
            "event": {"action": "update", "scope": "repo.content"},
            "repo": {"type": "model", "name": "org/model"},
            "updatedRefs": refs,
        }
    )
    decision = decide(payload, WatchList(orgs=["org"]))
    assert not decision.start and len(decision.reason) < 300, decision.reason
    assert "\n" not in decision.reason and "\x1b" not in decision.reason
    assert decision.reason.endswith("and 8997 more)")
