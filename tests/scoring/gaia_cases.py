"""GAIA conformance cases: plausible rewritings of the GAIA dev answers, each with GAIA's verdict.

The expected verdict of each case is written here from GAIA's published rule and the kind of
rewriting, not computed by the scorer under test: a rewriting is built knowing what GAIA's rule
does with it (a number written ``2.00`` is still the float 2; an article in front of a number makes
it no float; a list joined by "and" has one element, not two; ASCII punctuation is removed from a
plain string but kept inside list elements; curly quotes are not ASCII punctuation). The gold's kind
follows GAIA: a gold that parses as a float is a number, else one holding ``,`` or ``;`` is a list,
else a string.

``python -m tests.scoring.gaia_cases`` rewrites ``tests/scoring/golden/gaia_cases.jsonl`` from the
GAIA dev fixture and prints how often the project's old scorer (``score_answer``, web family, no
judge) disagrees with GAIA's rule on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "gaia_cases.jsonl"
FULLWIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}


def kind(gold: str) -> str:
    try:
        float(gold)
        return "number"
    except ValueError:
        pass
    return "list" if re.search(r"[,;]", gold) else "string"


def _fullwidth(text: str) -> str:
    return "".join(FULLWIDTH.get(ch, ch) for ch in text)


def _number_cases(gold: str) -> Iterator[tuple[str, str, bool]]:
    value = float(gold)
    integer = value.is_integer() and "." not in gold and "e" not in gold.lower()
    if integer:
        yield "decimal_zeros", f"{gold}.00", True
        yield "float_repr", f"{gold}.0", True
        yield "trailing_point", f"{gold}.", True
        if abs(value) >= 1000:
            yield "thousands_commas", f"{int(value):,}", True
            yield "thousands_spaces", f"{int(value):,}".replace(",", " "), False
        yield "scientific", f"{value:e}", True
        yield "off_by_one", str(int(value) + 1), False
    else:
        yield "trailing_zero", f"{gold}0", True
        if gold.startswith("0."):
            yield "no_leading_zero", gold[1:], True
        yield "rounded", f"{round(value, 1):g}" if round(value, 1) != value else f"{value * 10:g}", False
        yield "as_percent", f"{value * 100:g}%", value * 100 == value
    yield "dollar", f"${gold}", True
    yield "percent_sign", f"{gold}%", True
    yield "padded", f"  {gold} ", True
    yield "article", f"the {gold}", False
    yield "unit", f"{gold} m", False
    yield "approximately", f"approximately {gold}", False
    yield "repeated", f"{gold}, {gold}", False
    digits = "".join(FULLWIDTH[ch] if ch.isdigit() else ch for ch in gold)
    yield "fullwidth_digits", digits, True  # Python's float() reads Unicode decimal digits
    yield "empty", "", False


def _list_cases(gold: str) -> Iterator[tuple[str, str, bool]]:
    parts = [p.strip() for p in re.split(r"[,;]", gold)]
    sep = ";" if "," in gold else ","
    yield "other_separator", f"{sep} ".join(parts), True
    yield "no_spaces", sep.join(parts), True
    yield "extra_spaces", " ,  ".join(parts), True
    yield "upper_case", ", ".join(parts).upper(), True
    yield "inner_spaces_removed", ", ".join(p.replace(" ", "") for p in parts), True
    yield "joined_with_and", " and ".join(parts), len(parts) == 1
    if len(set(parts)) > 1:
        yield "reordered", ", ".join(reversed(parts)), parts == parts[::-1]
    yield "element_dropped", ", ".join(parts[:-1]) if len(parts) > 1 else "", False
    # punctuation is kept in a string element; a number element "9." is still the float 9
    yield "trailing_period", ", ".join(parts) + ".", kind(parts[-1]) == "number"
    yield "trailing_separator", ", ".join(parts) + ",", False
    if len(parts) > 2:
        yield "oxford_and", ", ".join(parts[:-1]) + ", and " + parts[-1], False
    yield "empty", "", False


def _string_cases(gold: str) -> Iterator[tuple[str, str, bool]]:
    letters = re.sub(r"[^A-Za-z]", "", gold)
    if letters:
        yield "lower_case", gold.lower(), True
        yield "upper_case", gold.upper(), True
    yield "trailing_period", f"{gold}.", True
    yield "quoted", f'"{gold}"', True
    yield "spaces_removed", gold.replace(" ", ""), True
    yield "padded", f"  {gold}  ", True
    if " " in gold:
        yield "hyphenated", gold.replace(" ", "-"), True
    yield "article", f"the {gold}", False
    yield "explained", f"{gold} (from the source)", False
    alnum = [i for i, ch in enumerate(gold) if ch.isalnum()]
    if len(alnum) > 1:
        yield "last_letter_dropped", gold[: alnum[-1]] + gold[alnum[-1] + 1 :], False
    yield "curly_quotes", f"\u201c{gold}\u201d", False  # not ASCII punctuation: GAIA keeps them
    if any(ch.isascii() and ch.isalnum() for ch in gold):
        yield "fullwidth", _fullwidth(gold), False  # no Unicode normalisation in GAIA
    yield "empty", "", False


def build_cases(answers: list[tuple[str, str]]) -> list[dict[str, object]]:
    """The cases for ``(task_id, gold)`` pairs: the gold itself, then its rewritings."""
    cases: list[dict[str, object]] = []
    for task_id, gold in answers:
        k = kind(gold)
        rewrites = {"number": _number_cases, "list": _list_cases, "string": _string_cases}[k](gold)
        seen = set()
        for name, prediction, expected in [("verbatim", gold, True), *rewrites]:
            if prediction in seen:
                continue
            seen.add(prediction)
            rule = "empty" if not prediction.strip() else k
            if (
                k == "list"
                and rule == "list"
                and len(re.split(r"[,;]", prediction)) != len(re.split(r"[,;]", gold))
            ):
                rule = "list_length"
            cases.append(
                {
                    "task_id": task_id,
                    "gold": gold,
                    "prediction": prediction,
                    "rewrite": name,
                    "expected": expected,
                    "rule": rule,
                }  # fmt: skip
            )
    return cases


def fixture_answers(path: Path) -> list[tuple[str, str]]:
    return [(str(row["task_id"]), str(row["answer"])) for row in json.loads(path.read_text("utf-8"))]


def read_golden() -> list[dict[str, object]]:
    return [json.loads(line) for line in GOLDEN.read_text("utf-8").splitlines() if line.strip()]


def old_scorer_disagreements(cases: list[dict[str, object]]) -> list[dict[str, object]]:
    """The cases where ``score_answer(prediction, gold, "web")`` without a judge differs from GAIA."""
    from coa.scoring import score_answer

    return [
        c
        for c in cases
        if score_answer(str(c["prediction"]), [str(c["gold"])], "web").correct != c["expected"]
    ]


def main() -> None:
    from tests.conftest import FIXTURES

    cases = build_cases(fixture_answers(FIXTURES / "gaia_dev_103.json"))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), "utf-8")
    bad = old_scorer_disagreements(cases)
    print(f"{len(cases)} cases from {len({c['task_id'] for c in cases})} answers -> {GOLDEN}")
    print(f"old score_answer (web, no judge) disagrees with GAIA's rule on {len(bad)}/{len(cases)}")


if __name__ == "__main__":
    main()
