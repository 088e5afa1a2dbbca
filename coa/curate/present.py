"""What a front end shows of a curation step (:data:`coa.plan.stages.PRESENTERS`): headline and report.

Kept out of the step's module, which never imports it: the curation key hashes the code its build
reaches (:meth:`coa.steps.Stage.code_files`), so a change of presentation rebuilds nothing.
"""

from __future__ import annotations

import posixpath

from coa.curate.core import REPORT_FILE
from coa.curate.step import CurateSummary
from coa.facts import Facts, Markdown, Page
from coa.steps import StepResult
from coa.view.links import sample_links


def present(s: CurateSummary, result: StepResult) -> Facts:
    """The curation headline, the data-quality report itself (a front end shows it in place) and
    links to its kept and quarantined runs (by reason) in the page committed with it."""
    views = [(f"kept runs ({s.rows_kept:,})", {"kind": "run"})]
    views.append((f"quarantined runs ({s.rows_quarantined:,})", {"kind": "quarantined"}))
    views += [
        (f"quarantined as {reason} ({n:,})", {"kind": "quarantined", "reason": reason})
        for reason, n in s.reasons.items()
    ]
    sample = sample_links(result.ref, "Kept and quarantined runs", views)
    return Facts(
        (
            Markdown("headline", s.headline, f"Curation headline: {result.ref.uri}"),
            Page(
                "report",
                result.ref.uri,
                posixpath.basename(s.report or REPORT_FILE),
                "Data-quality report (committed with the curated artifact)",
            ),
            *((sample,) if sample is not None else ()),
        )
    )
