"""What a stage command prints is what its stage presents, through one renderer (:mod:`coa._cli.facts`):
the facts the Prefect layer publishes, as text."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from coa import io
from coa._cli.facts import facts_text, show_facts, table_text
from coa.cli import app
from coa.facts import Facts, Link, Markdown, Table

runner = CliRunner()


def test_tables_markdown_links_render_as_text_and_warnings_go_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    facts = Facts(
        (
            Table("metrics", [{"family": "math", "pass@1": "50.0%"}, {"family": "code", "n": 3}], "Scores"),
            Markdown("curve", "# Loss\n\n![loss curve](data:image/png;base64,AAAA)\n\n| a |\n|---|"),
            Link("report", "file:///r.html", "Training report"),
        ),
        warnings=("the held-out loss rose",),
    )
    assert facts_text(facts).split("\n\n") == [
        "Scores\nfamily  pass@1  n\n------  ------  -\nmath    50.0%   -\ncode    -       3",
        "# Loss",
        "[image: loss curve]",
        "| a |\n|---|",
        "Training report: file:///r.html",
    ]
    show_facts(facts)
    out, err = capsys.readouterr()
    assert out.strip() == facts_text(facts) and "data:image" not in out
    assert "warning:" in err and "the held-out loss rose" in err


def test_a_long_table_shows_its_first_rows_and_counts_the_rest() -> None:
    text = table_text([{"step": i} for i in range(25)], max_rows=20)
    assert text.splitlines()[-2:] == ["19", "... 5 more row(s)"] and len(text.splitlines()) == 23


def test_a_stage_command_prints_its_uri_then_what_the_stage_presents(storage_root: Path) -> None:
    from coa.plan.stages import facts
    from coa.steps import StepResult
    from coa.synthetic import step as synthetic

    done = runner.invoke(
        app, ["tasks", "synthetic", "synthetic.train={arithmetic: 2}", "synthetic.heldout={arithmetic: 1}"]
    )
    assert done.exit_code == 0, done.output
    uri = done.stdout.strip().splitlines()[-1]  # the URI on the last line, as scripts read it
    ref = io.open_artifact(uri)
    result = StepResult(
        step="synthetic", ref=ref, reused=True, summary=io.read_lineage(ref)["result"]["summary"]
    )
    shown = facts_text(facts(synthetic.STAGE, result))
    assert shown and shown in done.stdout  # the same facts the Prefect layer publishes
    assert "train" in shown and "heldout" in shown
