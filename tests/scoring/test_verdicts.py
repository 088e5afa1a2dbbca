"""score_texts / score_predictions: many answers by each task's benchmark scorer (evaluation, sampling)."""

from __future__ import annotations

from coa.scoring.benchmarks import score_task
from coa.scoring.verdicts import score_predictions, score_texts

TASK = {"source": "nq_500", "family": "mhqa", "gold_answers": ["Wilhelm Conrad Röntgen"],
        "metadata": '{"data_source": "nq"}'}  # fmt: skip


def test_score_texts_reads_the_answer_segment_only() -> None:
    texts = [
        "<think>\nx\n</think>\n<answer>\nwilhelm conrad röntgen\n</answer>\n",
        "<observation>\nWilhelm Conrad Röntgen\n</observation>\n",  # observation text never counts
        "<answer>\nMarie Curie\n</answer>\n",
    ]
    scored = score_texts([TASK] * 3, texts)
    assert [p for p, _ in scored] == ["wilhelm conrad röntgen", None, "Marie Curie"]
    assert [v.correct for _, v in scored] == [True, False, False]
    assert scored[0][1] == score_task(TASK, "wilhelm conrad röntgen")


def test_score_predictions_keeps_the_order() -> None:
    predictions = ["Marie Curie", "Wilhelm Conrad Röntgen", None] * 5
    scored = score_predictions([TASK] * len(predictions), predictions)
    assert [p for p, _ in scored] == predictions
    assert [v.correct for _, v in scored] == [False, True, False] * 5
