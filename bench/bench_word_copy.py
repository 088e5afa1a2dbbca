"""Does the demo's student copy FizzBuzz's words from the question into its program? A teacher-forced probe.

A held-out FizzBuzz task (``coa.synthetic.program_specs``) is solved only when the program prints the
question's two words (``print('ZipPong')``, ``print('Zip')``, ``print('Pong')``) as well as testing
its two divisors. ``bench_demo_seeds.py`` counts such answers as "words miscopied"; this probe asks
where: for each FizzBuzz question it feeds the student the chat prompt (the SFT data's system
prompt and the question) and the teacher's own text up to the first ``print('`` (the plan and think
of the SFT data's FizzBuzz examples, then the reference program with the question's divisors), and
decodes greedily as many tokens as the first printed word pair has. Training questions (the model
saw their examples in SFT) against held-out ones: a student that gets the training pairs right but
not the held-out ones memorised per problem; one that gets neither has not learned the copy at all.

Printed: per split the questions probed, how many gave both words right and the first word right,
and the most frequent pair the student wrote. The inputs are artifacts of a demo run (``coa show``
lists them): the SFT model, the conversion (its ``sft`` table: the training questions and the
teacher's text) and the synthetic tasks (their ``heldout`` table).

    python bench/bench_word_copy.py --model MODEL_URI --converted CONVERTED_URI --tasks SYNTHETIC_URI \\
        [--train 60] [--json words.json] [--quick: 8 questions a split]
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import Bench, main

from coa import io
from coa.synthetic import programming

SPEC = "fizzbuzz"
CODE_START = "```py\n"
PRINT = "print('"


@dataclasses.dataclass(frozen=True)
class Probe:
    split: str
    question: str
    first_word: str
    wanted: str
    """The two words as the program prints them first (``word_a + word_b``)."""
    got: str

    @property
    def both(self) -> bool:
        return self.got == self.wanted

    @property
    def first(self) -> bool:
        return self.got.startswith(self.first_word)


def fizzbuzz_params(question: str) -> dict[str, Any] | None:
    """A FizzBuzz question's parameters (divisors ``a``, ``b``; words ``word_a``, ``word_b``), else None."""
    try:
        problem = programming.parse_question(question)
    except ValueError:
        return None
    return dict(problem["params"]) if problem["spec"] == SPEC else None


def teacher_prefix(lead: str, params: dict[str, Any]) -> str:
    """The teacher's text up to the first ``print('``: ``lead`` (its plan and think, up to and with the
    opening of the code block) and the reference program of ``params`` cut after its first ``print('``."""
    source = programming.reference_solution(SPEC, params)
    return lead + source[: source.index(PRINT) + len(PRINT)]


def lead_of(sft_rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The system prompt and the teacher's text before its first program, from a FizzBuzz SFT example."""
    for row in sft_rows:
        messages = row["messages"]
        if row["family"] == "code" and fizzbuzz_params(messages[1]["content"]) is not None:
            text = messages[2]["content"]
            if CODE_START in text:
                return messages[0]["content"], text[: text.index(CODE_START) + len(CODE_START)]
    raise SystemExit("no FizzBuzz example in the SFT table: was the run trained on programming?")


def probe(model_dir: Path, system: str, lead: str, questions: dict[str, list[str]]) -> list[Probe]:
    """Greedy continuations after ``print('`` for each split's questions (see the module)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = []
    for split, texts in questions.items():
        for question in texts:
            params = fizzbuzz_params(question)
            if params is None:
                continue
            wanted = params["word_a"] + params["word_b"]
            messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
            prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = tokenizer(prompt + teacher_prefix(lead, params), return_tensors="pt").input_ids
            n = len(tokenizer(wanted, add_special_tokens=False).input_ids)
            with torch.no_grad():
                made = model.generate(
                    ids, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.eos_token_id
                )
            got = tokenizer.decode(made[0, ids.shape[1] :].tolist(), skip_special_tokens=True)
            out.append(Probe(split, question, params["word_a"], wanted, got))
    return out


def summary(probes: Sequence[Probe]) -> dict[str, dict[str, Any]]:
    """Per split: questions, both words right, first word right, the most frequent output."""
    out: dict[str, dict[str, Any]] = {}
    for split in dict.fromkeys(p.split for p in probes):
        mine = [p for p in probes if p.split == split]
        common = Counter(p.got for p in mine).most_common(1)[0]
        out[split] = {
            "questions": len(mine),
            "both_words_right": sum(p.both for p in mine),
            "first_word_right": sum(p.first for p in mine),
            "most_frequent_output": {"text": common[0], "count": common[1]},
        }
    return out


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="the SFT (or RL) model artifact URI")
    parser.add_argument("--converted", help="the conversion artifact URI (its sft table)")
    parser.add_argument("--tasks", help="the synthetic tasks artifact URI (its heldout table)")
    parser.add_argument("--train", type=int, default=60, help="training questions to probe (default 60)")


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--quick``: 8 training and 8 held-out questions."""
    if None in (args.model, args.converted, args.tasks):
        raise SystemExit("--model, --converted and --tasks are required: a demo run's artifacts (coa show)")
    if args.quick:
        args.train = min(args.train, 8)
    sft_rows = io.read_table(args.converted, "sft", columns=["family", "messages"]).to_pylist()
    system, lead = lead_of(sft_rows)
    seen = [r["messages"][1]["content"] for r in sft_rows if r["family"] == "code"]
    train = list(dict.fromkeys(q for q in seen if fizzbuzz_params(q) is not None))[: args.train]
    heldout = [t["question"] for t in io.read_table(args.tasks, "heldout", columns=["question"]).to_pylist()]
    if args.quick:
        heldout = [q for q in heldout if fizzbuzz_params(q) is not None][:8]
    probes = probe(io.local_folder(args.model, "model"), system, lead, {"train": train, "heldout": heldout})
    result = summary(probes)
    for split, s in result.items():
        common = s["most_frequent_output"]
        print(
            f"{split}: {s['questions']} FizzBuzz questions, both words right {s['both_words_right']}, "
            f"first word right {s['first_word_right']}; most frequent output {common['text']!r} "
            f"({common['count']} times)"
        )
    bench.figure("summary", result)
    bench.figure("probes", [dataclasses.asdict(p) | {"both": p.both, "first": p.first} for p in probes])
    train_s, held_s = result.get("train"), result.get("heldout")
    if train_s and held_s and train_s["both_words_right"]:  # held-out against the questions it trained on
        share = {
            k: s["both_words_right"] / s["questions"] for k, s in (("train", train_s), ("heldout", held_s))
        }
        bench.ratio("held-out / training share with both words right", share["heldout"], share["train"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
