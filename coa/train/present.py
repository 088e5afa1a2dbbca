"""What a front end shows of an SFT step (:data:`coa.plan.stages.PRESENTERS`): the loss curve and figures.

Kept out of the step's module, which never imports it: the SFT key hashes the code its build reaches
(:meth:`coa.steps.Stage.code_files`), so a change of presentation leaves every SFT artifact reused.
"""

from __future__ import annotations

import base64

from coa import io
from coa.facts import Facts, Markdown, show
from coa.steps import StepResult
from coa.train.step import LOSS_PNG
from coa.train.summary import SFTSummary


def present(s: SFTSummary, result: StepResult) -> Facts:
    """The loss curve and the run's figures; the overfitting warning."""
    png = base64.b64encode(io.read_file(result.ref, LOSS_PNG)).decode()
    text = (
        f"# SFT loss\n\n![loss curve](data:image/png;base64,{png})\n\n"
        "| steps run / planned | final loss | held-out loss | tokens seen | tokens/s | device |\n"
        "|---|---|---|---|---|---|\n"
        f"| {s.steps_run} / {s.steps_planned} | {show(s.final_loss)} | {show(s.heldout_loss)} | "
        f"{show(s.tokens_seen)} | {show(s.tokens_per_s)} | {s.device} |\n\nModel: `{result.ref.uri}`"
        + (f"\n\n**Warning:** {s.overfit_warning}" if s.overfit_warning else "")
    )
    return Facts((Markdown("loss-curve", text, "Training and held-out loss of the SFT run"),))
