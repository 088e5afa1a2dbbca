"""What a front end shows of a curation step (:data:`coa.plan.stages.PRESENTERS`): headline and report.

Kept out of the step's module, which never imports it: the curation key hashes the code its build
reaches (:meth:`coa.steps.Stage.code_files`), so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

from coa import io
from coa.curate.step import CurateSummary
from coa.facts import Facts, Link, Markdown
from coa.facts import link as browser_link
from coa.steps import StepResult


def present(s: CurateSummary, result: StepResult) -> Facts:
    """The curation headline and a link to the data-quality report."""
    return Facts(
        (
            Markdown("headline", s.headline, f"Curation headline: {result.ref.uri}"),
            Link(
                "report",
                browser_link(s.report or io.join(result.ref.uri, "report.html")),
                "Data-quality report (committed with the curated artifact)",
            ),
        )
    )
