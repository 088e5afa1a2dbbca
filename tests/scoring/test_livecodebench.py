"""LiveCodeBench: our scorer against LiveCodeBench's own evaluator, side by side, on generated answers.

The publisher's side is LCB's pipeline given LCB's own data: ``extract_code`` (chat-model style) on
the response, then ``check_correctness`` on a sample in LCB's ``input_output`` form, all cases in
one run of a plain driver in the sandbox (model code runs nowhere else). Ours is ``score_task`` on a
``task.v1`` row holding AFM's test format (stdin lists, or the assert snippet). The old rule
(``coa-code-tests``: the project's harness, asserts, joined code blocks) is scored beside them, to
show where it disagreed. Cases: :mod:`tests.scoring.lcb_cases`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coa.scoring.benchmarks import SCORERS, score_task
from coa.scoring.benchmarks.livecodebench import functional_io, global_timeout_s, lcb_code, lcb_sample
from coa.tools.sandbox import SandboxConfig, run_python
from tests.scoring.lcb_cases import all_cases
from tests.tools.support import requires_sandbox

REFERENCE = """\
import json, os, sys
cases = json.loads(sys.stdin.read())
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
from livecodebench.evaluation.compute_code_generation_metrics import check_correctness
from livecodebench.lm_styles import LMStyle
from livecodebench.utils.extraction_utils import extract_code
verdicts = []
for case in cases:
    code = extract_code(case["response"], LMStyle.OpenAIChat)
    results, _ = check_correctness({"input_output": json.dumps(case["lcb"])}, code, timeout=6, debug=False)
    verdicts.append(all(r > 0 for r in results) and bool(results))
out.write("@@verdicts@@" + json.dumps(verdicts) + "\\n")
out.flush()
"""


def publisher_verdicts(cases: list[dict[str, Any]]) -> list[bool]:
    payload = json.dumps([{"response": c["response"], "lcb": c["lcb"]} for c in cases])
    limit = sum(global_timeout_s(len(c["lcb"]["inputs"])) for c in cases)
    result = run_python(REFERENCE, payload, SandboxConfig(cpu_seconds=limit, wall_seconds=limit))
    line = next(x for x in result.stdout.splitlines() if x.startswith("@@verdicts@@"))
    return [bool(v) for v in json.loads(line[len("@@verdicts@@") :])]


def task(case: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": case["name"], "source": "livecodebench_v5", "family": "code",
            "test_cases": case["tests"], "metadata": "{}"}  # fmt: skip


@pytest.mark.sandbox
@requires_sandbox
def test_our_scorer_and_lcbs_evaluator_agree_on_every_generated_answer() -> None:
    cases = all_cases()
    theirs = publisher_verdicts(cases)
    ours, old = [], []
    for case in cases:
        verdict = score_task(task(case), case["response"])
        assert verdict.scorer.name == "livecodebench"
        ours.append(verdict.correct)
        old.append(SCORERS["coa-code-tests"].score(task(case), case["response"]).correct)
    disagree = [c["name"] for c, a, b in zip(cases, ours, theirs, strict=True) if a != b]
    old_disagree = [c["name"] for c, a, b in zip(cases, old, theirs, strict=True) if a != b]
    print(f"livecodebench: {len(cases)} generated answers, {len(cases) - len(disagree)} agree; "
          f"the old coa-code-tests rule disagreed on {len(old_disagree)}: {old_disagree}")  # fmt: skip
    assert disagree == []
    assert 0 < sum(theirs) < len(cases) and len(cases) >= 80
    # the examples: sys.stdin.buffer fails under LCB, the last of two blocks counts, a tuple passes
    verdict = dict(zip([c["name"] for c in cases], theirs, strict=True))
    assert (
        not verdict["buffer+print"]
        and verdict["two_blocks_last_right"]
        and not verdict["two_blocks_last_wrong"]
    )
    assert verdict["tuple"] and verdict["tuple_toplevel"]
    assert {"buffer+print", "two_blocks_last_right", "tuple"} <= set(old_disagree)


def test_every_functional_test_of_the_afm_file_reads_as_lcbs_call_form(afm_fixtures: Path) -> None:
    from coa.tasksets import import_tasks
    from coa.tasksets.config import TaskSourceConfig

    rows = import_tasks(
        [TaskSourceConfig(path=str(afm_fixtures / "livecodebench_v5.parquet"))]
    ).tasks.to_pylist()
    functional = [r["test_cases"] for r in rows if r["test_cases"]["kind"] == "functional"]
    assert len(rows) == 167 and len(functional) == 62
    for tests in functional:
        fn_name, inputs, outputs = functional_io(tests["functional"])
        assert fn_name == tests["fn_name"] and len(inputs) == len(outputs) >= 1
        io = json.loads(lcb_sample(tests)["input_output"])
        assert io["fn_name"] == fn_name and all(json.loads(o) is not None or o == "null" for o in outputs)


def test_the_code_lcb_runs() -> None:
    assert (
        lcb_code("```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```") == "print(2)"
    )  # the last block
    assert lcb_code("print(3)\n") == "print(3)"  # no fence: the whole answer (LCB's base-model style)
    with pytest.raises(ValueError, match="not an equality"):
        functional_io("result = Solution().f(1)\nassert result != 2\n")
    assert functional_io("r = Solution().f([1, 2], 'a')\nassert r == {'k': 1}") == (
        "f",
        ['[1, 2]\n"a"'],
        ['{"k": 1}'],
    )
