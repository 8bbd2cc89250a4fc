"""Trial data: offline text, the cached byte-level BPE tokenizer, a world-size-independent batch order."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from day0.errors import UsageError
from day0.steps.trial.data import DEFAULT_DATASET, batch_for_step, load_text, prepare_data


def test_default_text_is_the_python_docs() -> None:
    text, label = load_text(None)
    assert label == DEFAULT_DATASET and len(text) > 400_000 and "for" in text


def test_tokenizer_trained_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    first = prepare_data(str(corpus), vocab_size=300)
    assert 257 < first.vocab_size <= 300 and first.tokenizer_dir.is_relative_to(tmp_path / "cache")
    assert (first.tokenizer_dir / "tokenizer.json").exists() and (first.tokenizer_dir / "tokens.npy").exists()
    mtime = (first.tokenizer_dir / "tokenizer.json").stat().st_mtime_ns
    again = prepare_data(f"file://{corpus}", vocab_size=300)
    assert (again.tokens == first.tokens).all() and (first.tokenizer_dir / "tokenizer.json").stat().st_mtime_ns == mtime
    assert first.tokens.size < len(corpus.read_text()) / 2  # BPE merges: fewer tokens than bytes


def test_bad_dataset_and_vocab_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"trial.dataset"):
        prepare_data(str(tmp_path / "missing.txt"))
    with pytest.raises(UsageError, match="vocab_size"):
        prepare_data(None, vocab_size=100)


def test_batch_order_depends_on_step_and_seed_only() -> None:
    tokens = torch.arange(10_000)
    a = batch_for_step(tokens, 7, global_batch=4, seq_len=16, seed=0)
    assert a.shape == (4, 17) and a.dtype == torch.long
    assert torch.equal(a, batch_for_step(tokens, 7, 4, 16, 0))
    assert not torch.equal(a, batch_for_step(tokens, 8, 4, 16, 0))
    assert not torch.equal(a, batch_for_step(tokens, 7, 4, 16, 1))
    assert torch.equal(a[:, 1:], a[:, :-1] + 1)  # contiguous windows of the text
