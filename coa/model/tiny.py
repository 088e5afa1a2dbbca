"""A tiny student model built on the spot: a BPE tokenizer trained on the data and a random-init Qwen2.

:func:`init_model` (behind ``coa model init``) writes a folder that every later stage loads like
any Hugging Face checkpoint (``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained``):

* **Tokenizer.** Byte-level BPE trained with ``tokenizers`` on the given texts, with the Qwen2
  pipeline: NFC normalisation, the Qwen pre-tokenisation regex (every digit is its own token),
  then ByteLevel without its own regex. ``AutoTokenizer`` rebuilds exactly that pipeline for a
  ``qwen2`` config (it ignores ``tokenizer_class``), so training with anything else would give
  different ids after a reload. Special tokens: ``<|endoftext|>`` (pad), ``<|im_start|>``,
  ``<|im_end|>`` (end of turn, eos). Every CoA tag (``<think>``, ``</think>``, …, from
  :data:`coa.format.TAGS`) is an added, non-special token: one id each (usable as a stop id), kept
  by ``decode(skip_special_tokens=True)``. Tags and special tokens are cut out of the training
  texts first, so no merges are spent on their pieces. The chat template is plain ChatML.
* **Model.** ``Qwen2ForCausalLM`` with random weights (seeded), tied embeddings, SDPA attention,
  ``vocab_size == len(tokenizer)``; eos = ``<|im_end|>``, pad = ``<|endoftext|>``.
* **Pretraining** (``pretrain_steps`` > 0, :func:`pretrain`): next-token loss on every token of the same
  texts, observations included, before the model is saved. SFT trains only what the student writes;
  a name it has only read (an entity that is never a hop's answer) would otherwise be a token whose
  output it was never trained to produce. A pretrained model has written its whole corpus, as a
  hub model has written the web.

:func:`sft_corpus` gives the texts to train the tokenizer on from an ``sft.v1`` table, and
:func:`init_model_artifact` writes the folder as a content-addressed artifact (``model/<name>``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.errors import UserError
from coa.model.config import ENDOFTEXT, IM_END, SPECIAL_TOKENS, TAG_TOKENS, TinyModelConfig

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Plain ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message."""

MODEL_CARD = "coa_model.json"
"""Written beside the weights: the :class:`TinyModelConfig`, parameter count and vocabulary size."""

_RESERVED_RE = re.compile("|".join(re.escape(t) for t in sorted(SPECIAL_TOKENS + TAG_TOKENS, key=len)[::-1]))


def qwen2_pretokenize_regex() -> str:
    """The regex ``Qwen2Tokenizer`` splits with (digits one by one), read from transformers itself."""
    from transformers.models.qwen2 import tokenization_qwen2

    return str(tokenization_qwen2.PRETOKENIZE_REGEX)


def train_tokenizer(texts: Iterable[str], config: TinyModelConfig) -> Any:
    """A ``PreTrainedTokenizerFast`` (Qwen2 pipeline, ChatML specials, tag tokens, ChatML template)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(qwen2_pretokenize_regex()), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size - len(TAG_TOKENS),
        min_frequency=config.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_without_reserved(texts), trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        model_max_length=config.max_position_embeddings,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(config: TinyModelConfig, tokenizer: Any) -> Any:
    """A random-init ``Qwen2ForCausalLM`` sized to ``tokenizer`` (seeded by ``config.seed``)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=config.tie_word_embeddings,
        initializer_range=config.initializer_range,
        bos_token_id=None,
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT], bos_token_id=None
    )
    return model


def pretrain(
    model: Any,
    tokenizer: Any,
    texts: Iterable[str],
    config: TinyModelConfig,
    progress: Callable[[int, int], None] | None = None,
) -> list[float]:
    """``config.pretrain_steps`` AdamW steps of next-token loss on ``texts`` packed into blocks; the losses.

    Every text is encoded, followed by ``<|endoftext|>``, and the stream cut into
    ``pretrain_block_size`` blocks visited in a seeded random order (again once all are seen). The rate
    warms up over the first 5% of the steps and decays along a cosine to a tenth. On a CUDA machine the
    steps run on the GPU and the model comes back to the CPU. ``progress(done, total)`` is called
    every 50 steps and at the end.
    """
    import math

    import torch

    eos = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    stream: list[int] = []
    for text in texts:
        stream.extend(tokenizer(text, verbose=False)["input_ids"])
        stream.append(eos)
    block, n_steps = config.pretrain_block_size, config.pretrain_steps
    n_blocks = len(stream) // block
    if n_blocks < config.pretrain_batch_size:
        raise UserError(
            f"the corpus holds {len(stream)} tokens, fewer than one pretraining batch "
            f"({config.pretrain_batch_size} x {block}); lower student.tiny.pretrain_block_size"
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    blocks = torch.tensor(stream[: n_blocks * block]).view(n_blocks, block)
    model.to(device)
    generator = torch.Generator().manual_seed(config.seed)
    # fused: one kernel for every parameter's update, on CPU too: the demo's pretraining step 72.7 ->
    # 65.1 ms (optimizer 6.5 -> 2.5 ms; bench/bench_pretrain_adamw.py, 2026-11-28)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.pretrain_learning_rate, betas=(0.9, 0.98), weight_decay=0.01, fused=True
    )
    warmup = max(1, n_steps // 20)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, n_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    order, at, losses = torch.randperm(n_blocks, generator=generator), 0, []
    model.train()
    for step in range(1, n_steps + 1):
        if at + config.pretrain_batch_size > n_blocks:
            order, at = torch.randperm(n_blocks, generator=generator), 0
        batch = blocks[order[at : at + config.pretrain_batch_size]].to(device)
        at += config.pretrain_batch_size
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if progress is not None and (step % 50 == 0 or step == n_steps):
            progress(step, n_steps)
    model.to("cpu")
    model.eval()
    return losses


def init_model(
    texts: Iterable[str],
    config: TinyModelConfig,
    out_dir: str | Path,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Train the tokenizer on ``texts``, build the model, pretrain it on them if asked, save.

    Returns ``out_dir``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = list(texts)
    tokenizer = train_tokenizer(texts, config)
    model = build_model(config, tokenizer)
    losses = pretrain(model, tokenizer, texts, config, progress) if config.pretrain_steps else []
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    card = {
        "kind": "coa.tiny_qwen2",
        "config": config.model_dump(mode="json"),
        "n_params": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "special_tokens": list(SPECIAL_TOKENS),
        "tag_tokens": list(TAG_TOKENS),
        "pretrain_loss": {"first": losses[0], "last": losses[-1]} if losses else None,
    }
    (out / MODEL_CARD).write_text(json.dumps(card, indent=2, sort_keys=True))
    return out


def sft_corpus(examples: pa.Table) -> Iterator[str]:
    """Texts to train the tokenizer on: every message of an ``sft.v1`` table, and the role names."""
    yield from ("system\n", "user\n", "assistant\n")
    for messages in examples.column("messages").to_pylist():
        for message in messages:
            yield message["content"]


def _without_reserved(texts: Iterable[str]) -> Iterator[str]:
    """The texts cut at every tag and special token (those never reach the BPE model at encode time)."""
    for text in texts:
        for piece in _RESERVED_RE.split(text):
            if piece:
                yield piece
