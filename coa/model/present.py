"""What a front end shows of a student build (:data:`coa.plan.stages.PRESENTERS`): its size and pretraining.

Kept out of the step's module, which never imports it: the student's key hashes the code its build
reaches (:meth:`coa.steps.Stage.code_files`), so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

import json

from coa import io
from coa.facts import Facts, Markdown, show
from coa.model.step import MODEL_FOLDER, StudentSummary
from coa.model.tiny import MODEL_CARD
from coa.steps import StepResult


def present(s: StudentSummary, result: StepResult) -> Facts:
    """The model's parameters and vocabulary (its card), the tokenizer's examples, the pretraining loss."""
    card = json.loads(io.read_file(result.ref, f"{MODEL_FOLDER}/{MODEL_CARD}"))
    text = (
        f"{card['n_params']:,} parameters, vocabulary {card['vocab_size']:,}; tokenizer trained on "
        f"{s.examples:,} examples; pretraining: {s.pretrain_steps:,} steps, loss "
        f"{show(s.pretrain_loss_first)} -> {show(s.pretrain_loss_last)}\n\n"
        f"Load it from `{io.join(result.ref.uri, MODEL_FOLDER)}`"
    )
    return Facts((Markdown("student", text, f"Tiny student: {result.ref.uri}"),))
