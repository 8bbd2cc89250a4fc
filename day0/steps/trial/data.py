"""Trial data: offline text, a byte-level BPE tokenizer trained on it, and a deterministic batch order.

Contract: the batch of step `s` depends only on (tokens, seed, s, global batch, seq_len), never on the
world size or on where a run resumed, so the reference and the candidate, a resumed run and an
uninterrupted one, all see the same sequences at every step. Rank r of a world of W takes its slice
of that global batch. The tokenizer and token ids are cached outside the repository under
`$DAY0_CACHE` (default `~/.cache/day0`), keyed by the text's hash and the vocabulary size.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np
import torch

from day0.errors import UsageError
from day0.paths import cache_dir
from day0.spec.checks import dataset_issues
from day0.steps.trial.config import DEFAULT_DATASET

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "DEFAULT_DATASET",
    "TokenData",
    "batch_for_step",
    "load_text",
    "prepare_data",
    "train_tokenizer",
]

EOS_TOKEN = "<|endoftext|>"


def load_text(dataset: str | None) -> tuple[str, str]:
    """(text, label). Default: the CPython docs' topics (`pydoc_data.topics`, ~465k characters)."""
    if dataset in (None, DEFAULT_DATASET):
        from pydoc_data.topics import topics

        return "\n\n".join(topics[k] for k in sorted(topics)), DEFAULT_DATASET
    if dataset.startswith("s3://"):
        from day0.store import open_store

        parent, _, name = dataset.rpartition("/")
        return open_store(parent).get_bytes(name).decode("utf-8", errors="replace"), dataset
    if issues := dataset_issues(dataset):  # the check `day0 validate` makes
        raise UsageError(str(issues[0]))
    path = Path(urlparse(dataset).path if dataset.startswith("file://") else dataset)
    return path.read_text(encoding="utf-8", errors="replace"), dataset


def train_tokenizer(text: str, vocab_size: int, directory: Path) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `text`, saved as a normal HF tokenizer in `directory` (reused if there)."""
    from transformers import PreTrainedTokenizerFast

    if (directory / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(directory)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN)
    tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
    fast.save_pretrained(tmp)
    try:
        os.replace(tmp, directory)  # atomic publish; a concurrent writer may have won the race
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(directory)


@dataclass(frozen=True)
class TokenData:
    tokens: np.ndarray  # int32 token ids of the whole text
    vocab_size: int  # tokenizer vocabulary (the scaled model's vocab)
    eos_token_id: int
    dataset: str  # label of the text source
    text_sha: str  # sha256 of the text, first 12 hex digits
    tokenizer_dir: Path


def prepare_data(dataset: str | None = None, vocab_size: int = 512) -> TokenData:
    """Load the text, train (or reuse) the tokenizer, tokenize (or reuse the cached ids)."""
    if vocab_size < 257:
        raise UsageError(f"tokenizer vocab_size {vocab_size} must exceed 256 (the byte alphabet plus EOS)")
    text, label = load_text(dataset)
    sha = hashlib.sha256(text.encode()).hexdigest()[:12]
    root = cache_dir() / "tokenizers" / f"{sha}-v{vocab_size}"
    root.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(text, vocab_size, root)
    ids_path = root / "tokens.npy"
    if ids_path.exists():
        tokens = np.load(ids_path)
    else:
        tokens = np.asarray(tokenizer(text)["input_ids"], dtype=np.int32)
        tmp = root / f".tokens.{os.getpid()}.npy"
        np.save(tmp, tokens)
        os.replace(tmp, ids_path)
    return TokenData(
        tokens=tokens,
        vocab_size=len(tokenizer),
        eos_token_id=int(tokenizer.eos_token_id),
        dataset=label,
        text_sha=sha,
        tokenizer_dir=root,
    )


def batch_for_step(tokens: torch.Tensor, step: int, global_batch: int, seq_len: int, seed: int) -> torch.Tensor:
    """The global batch of `step` (0-based): [global_batch, seq_len + 1] windows at seeded random offsets."""
    if tokens.numel() < seq_len + 2:
        raise UsageError(f"dataset has {tokens.numel()} tokens, fewer than seq_len + 2 = {seq_len + 2}")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, tokens.numel() - seq_len - 1, (global_batch,), generator=gen)
    return torch.stack([tokens[s : s + seq_len + 1] for s in starts.tolist()]).long()
