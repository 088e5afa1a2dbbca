"""The reporting kit's pages inside the Prefect UI's markdown (:func:`coa.pages.in_markdown`)."""

from __future__ import annotations

import re

from coa import pages

GATE = ["suite", "check", "expectation", "success", "observed", "unexpected", "of"]
CHECKS = [
    ["trajectories", "n_steps_between", "expect_column_values_to_be_between", True, "[1, 40]", 0, 20],
    ["trajectories", "final_answer_nonnull", "expect_column_values_to_not_be_null", False, None, 1, 20],
]


def _tables(markdown: str) -> list[list[list[str]]]:
    """The markdown tables of ``markdown``: rows of cells (the separator rows left out)."""
    out: list[list[list[str]]] = []
    for block in markdown.split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if lines:
            rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
            out.append([r for r in rows if set("".join(r)) != {"-"}])
    return out


def test_a_table_wider_than_the_ui_is_split_into_tables_led_by_its_first_column() -> None:
    """The curation gate's table needs ~115 characters side by side: the UI clipped its right columns.
    In markdown it becomes tables of consecutive columns, each led by the first, none over the
    budget, every cell kept once (the first column's in each)."""
    markdown = pages.in_markdown(pages.page("r", [pages.table(GATE, CHECKS)]), lambda rel: rel)
    tables = _tables(markdown)
    assert len(tables) == 2
    assert [t[0][0] for t in tables] == ["suite", "suite"]
    assert [c for t in tables for c in t[0][1:]] == GATE[1:]  # every column once, in order
    for table in tables:
        assert sum(max(pages._min_chars(r[c]) for r in table) for c in range(len(table[0]))) <= 90
        assert [r[0] for r in table[1:]] == ["trajectories", "trajectories"]
    cells = {c for t in tables for r in t[1:] for c in r[1:]}
    assert {r"expect\_column\_values\_to\_not\_be\_null", r"\[1, 40\]", "False", "20"} <= cells


def test_a_table_that_fits_stays_one_table() -> None:
    markdown = pages.in_markdown(pages.page("r", [pages.table(["metric", "value"], [["runs in", 20]])]), str)
    assert _tables(markdown) == [[["metric", "value"], ["runs in", "20"]]]
    narrow = pages.table(GATE[:4], [r[:4] for r in CHECKS])
    assert len(_tables(pages.in_markdown(pages.page("r", [narrow]), str))) == 1
