"""The tiny student: tokenizer round trip via AutoTokenizer, single-token tags, split digits, the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from coa import io
from coa.errors import UserError
from coa.format import TAGS, chat_text, render
from coa.model import SPECIAL_TOKENS, TAG_TOKENS, TinyModelConfig, init_model, sft_corpus
from coa.model.tiny import MODEL_CARD
from tests.train.rows import SYSTEM, arith_rows, arith_trajectory

SMALL = TinyModelConfig(
    vocab_size=600, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, seed=3
)
PROBES = [
    "What is 9876 * 54 - 3210?",
    "<|im_start|>user\nCafé naïve — ｆｕｌｌ width, ünïcödé, 東京 2024<|im_end|>\n",
    "<think>\nx</think><code>\n```python\nprint(12+345)\n```\n</code>\n<observation>\n357\n</observation>\n",
    "  leading spaces\n\n\ttabs and\r\nnewlines  ",
    "e\u0301 (decomposed) vs \u00e9",
    "tags glued:<answer>\\boxed{7}</answer><|endoftext|>",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(200)), SMALL, tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def auto(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


def test_autotokenizer_gives_identical_ids(model_dir: Path, auto: Any) -> None:
    from tokenizers import Tokenizer

    fast = PreTrainedTokenizerFast.from_pretrained(model_dir)
    raw = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert type(auto).__name__ == "Qwen2Tokenizer"  # rebuilt from vocab + merges, not read as saved
    question, t = arith_trajectory(123, "+", 45, "*", 6)
    chat, _ = chat_text(auto, SYSTEM, question, render(t))
    for text in [*PROBES, chat]:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert auto(text, add_special_tokens=False)["input_ids"] == ids
        assert fast(text, add_special_tokens=False)["input_ids"] == ids
        assert auto.decode(ids) == fast.decode(ids)
    assert len(auto) == len(fast) <= SMALL.vocab_size
    assert (auto.eos_token, auto.pad_token) == ("<|im_end|>", "<|endoftext|>")


def test_tags_and_specials_are_single_tokens(auto: Any) -> None:
    assert len(TAG_TOKENS) == 2 * len(TAGS) and "</observation>" in TAG_TOKENS
    for token in (*TAG_TOKENS, *SPECIAL_TOKENS):
        ids = auto(f"a{token}b", add_special_tokens=False)["input_ids"]
        assert auto.convert_tokens_to_ids(token) in ids
        assert auto.convert_ids_to_tokens(ids).count(token) == 1
        assert len(auto(token, add_special_tokens=False)["input_ids"]) == 1
    # Tags are model text, not control tokens: skip_special_tokens keeps them, drops ChatML.
    ids = auto("<|im_start|><think>\nhi\n</think>\n<|im_end|>", add_special_tokens=False)["input_ids"]
    assert auto.decode(ids, skip_special_tokens=True) == "<think>\nhi\n</think>\n"


def test_digits_are_split(auto: Any) -> None:
    ids = auto("x 1234567890 y", add_special_tokens=False)["input_ids"]
    pieces = auto.convert_ids_to_tokens(ids)
    assert [p for p in pieces if any(c.isdigit() for c in p)] == list("1234567890")
    assert all(sum(c.isdigit() for c in token) <= 1 for token in auto.get_vocab())


def test_chat_template_is_chatml(auto: Any) -> None:
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    text = auto.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    full, start = chat_text(auto, "S", "Q", "<answer>\nA\n</answer>\n")
    assert full == text + "<answer>\nA\n</answer>\n<|im_end|>\n" and start == len(text)


def test_model_is_a_tied_random_qwen2(model_dir: Path, auto: Any) -> None:
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.vocab_size == len(auto)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        32,
        2,
        4,
        2,
    )
    assert (
        cfg.tie_word_embeddings
        and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    )
    assert cfg.eos_token_id == auto.convert_tokens_to_ids("<|im_end|>")
    assert cfg.pad_token_id == auto.pad_token_id
    card = json.loads((model_dir / MODEL_CARD).read_text())
    assert card["n_params"] == sum(p.numel() for p in model.parameters())
    out = model.generate(torch.tensor([auto("<think>")["input_ids"]]), max_new_tokens=3, do_sample=False)
    assert isinstance(out, torch.Tensor) and out.shape[1] <= 4


def test_same_config_same_weights(tmp_path: Path, model_dir: Path) -> None:
    again = init_model(sft_corpus(arith_rows(200)), SMALL, tmp_path / "again")
    a = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(again).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (model_dir / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()


def test_default_config_is_the_feasibility_model(tmp_path: Path) -> None:
    config = TinyModelConfig()
    assert (config.vocab_size, config.hidden_size, config.num_layers, config.num_heads) == (2048, 128, 4, 4)
    with pytest.raises(ValueError, match="not divisible by num_kv_heads"):
        TinyModelConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        TinyModelConfig(hidden_size=30, num_heads=4)


def test_student_step_is_content_addressed(tmp_path: Path) -> None:
    import schemas
    from coa.model import step as student_step
    from coa.model.config import StudentConfig
    from coa.steps import TableInput, run_step

    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("converted", "unit", {"n": 50})
    writer.write_table("sft", schemas.SFT.from_rows(arith_rows(50).to_pylist()), schemas.SFT)
    step = student_step.step(StudentConfig(tiny=SMALL), TableInput(writer.commit(), "sft"))
    ref = run_step(step, store).ref
    assert "model/config.json" in ref.files and "model/tokenizer.json" in ref.files
    assert run_step(step, store).ref.uri == ref.uri  # reused
    local = Path(ref.uri) / "model"
    assert AutoTokenizer.from_pretrained(local)("12")["input_ids"] == [
        AutoTokenizer.from_pretrained(local).convert_tokens_to_ids(d) for d in "12"
    ]


def _mean_loss(model: Any, tokenizer: Any, texts: list[str]) -> float:
    with torch.no_grad():
        encoded = [tokenizer(text, return_tensors="pt").input_ids for text in texts]
        losses = [model(input_ids=ids, labels=ids).loss for ids in encoded]
    return float(torch.stack(losses).mean())


def test_pretraining_teaches_the_corpus_and_is_recorded(tmp_path: Path, model_dir: Path, auto: Any) -> None:
    config = SMALL.model_copy(update={"pretrain_steps": 60, "pretrain_block_size": 64})
    reported: list[tuple[int, int]] = []
    pretrained = init_model(
        sft_corpus(arith_rows(200)), config, tmp_path / "pre", lambda d, t: reported.append((d, t))
    )
    assert reported == [(50, 60), (60, 60)]
    question, trajectory = arith_trajectory(321, "-", 54, "+", 7)
    texts = [chat_text(auto, SYSTEM, question, render(trajectory))[0]]
    random_loss = _mean_loss(AutoModelForCausalLM.from_pretrained(model_dir), auto, texts)
    assert _mean_loss(AutoModelForCausalLM.from_pretrained(pretrained), auto, texts) < random_loss - 1.0
    card = json.loads((pretrained / MODEL_CARD).read_text())
    assert card["pretrain_loss"]["last"] < card["pretrain_loss"]["first"]
    assert json.loads((model_dir / MODEL_CARD).read_text())["pretrain_loss"] is None
    again = init_model(sft_corpus(arith_rows(200)), config, tmp_path / "again")
    a, b = (AutoModelForCausalLM.from_pretrained(d).state_dict() for d in (pretrained, again))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same corpus, config and seed: the same weights


def test_pretraining_refuses_a_corpus_smaller_than_one_batch(tmp_path: Path) -> None:
    config = SMALL.model_copy(update={"pretrain_steps": 5, "pretrain_block_size": 2048})
    with pytest.raises(UserError, match="lower student.tiny.pretrain_block_size"):
        init_model(sft_corpus(arith_rows(3)), config, tmp_path / "m")
