"""LiveCodeBench scored by LiveCodeBench's own evaluator, run inside the project's sandbox.

Nothing of the evaluator is rewritten: its package (``nvidia-livecodebench``, :mod:`.publishers`)
is installed in the project's virtualenv, whose site-packages the sandbox binds read-only, and a
short driver run *in the sandbox* calls ``check_correctness`` of
``livecodebench.evaluation.compute_code_generation_metrics`` on the answer, exactly as LCB's
``codegen_metrics`` does: a ``multiprocessing`` child runs ``run_test`` (6 s ``signal.alarm`` per
test, stdin swapped for a text stream, ``sys.stdout`` captured, tuples converted to lists, lines
stripped and compared, decimals as numbers, the first failure stops), the parent kills it after
LCB's global timeout, ``(6 + 1) × tests + 5`` s, and a killed child fails every test. The sandbox's
own wall limit is that global timeout plus :data:`START_MARGIN_S`; model code runs nowhere else.

What the project supplies is the translation of a ``task.v1`` row into LCB's sample and of the
answer into the code LCB runs:

* the code: LCB's ``extract_code`` for chat models (the **last** fenced block) when the answer has a
  fence; an answer without one is taken whole (LCB's style for base models);
* stdin tests: ``{"inputs": [...], "outputs": [...]}``, as LCB's dataset holds them;
* functional tests: AFM's files ship each as ``result = Solution().<fn>(<args>)`` followed by
  ``assert result == <expected>``; :func:`functional_io` reads the arguments and the expected value
  back as JSON lines and LCB's ``fn_name``, the form LCB's dataset holds, so LCB's call-based
  grader (not an assert) compares the result.

The driver writes its verdict on a duplicate of stdout taken before any model code runs (stdout
itself is sent to ``/dev/null``, as the evaluator's parent never reads a child's stdout), and the
last verdict line counts. Like LCB's own harness, the answer runs in the evaluator's process tree:
an adversarial answer can forge its verdict there, never escape the sandbox.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from coa.scoring.benchmarks.publishers import LIVECODEBENCH, grader_import
from coa.tools.harness_pool import ProgramRunner
from coa.tools.sandbox import SandboxConfig

TEST_TIMEOUT_S = 6
"""Per-test limit of LiveCodeBench's evaluator (``codegen_metrics``' ``timeout``), seconds."""
START_MARGIN_S = 15.0
"""Sandbox wall time beyond LCB's global timeout: the interpreter, the evaluator's import and its
``multiprocessing.Manager``."""
MEMORY_MB = 4096
"""Address space per process (LCB's ``reliability_guard`` documents 4 GB)."""
MARKER = "@@coa-lcb-verdict@@"

DRIVER = f"""\
import json, os, sys
payload = json.loads(sys.stdin.read())
verdict_out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
from livecodebench.evaluation.compute_code_generation_metrics import check_correctness
results, metadata = check_correctness(
    payload["sample"], payload["code"], timeout=payload["timeout"], debug=False
)
verdict_out.write("\\n{MARKER}" + json.dumps(
    {{"results": list(results), "metadata": dict(metadata)}},
    default=lambda o: o.item() if hasattr(o, "item") else str(o),
) + "\\n")
verdict_out.flush()
"""
"""The program the sandbox runs: LCB's ``check_correctness`` on the payload read from stdin."""


def global_timeout_s(tests: int, timeout: int = TEST_TIMEOUT_S) -> float:
    """LCB's ``check_correctness`` join timeout for ``tests`` tests."""
    return float((timeout + 1) * tests + 5)


def lcb_sandbox(tests: int) -> SandboxConfig:
    """The sandbox for one answer with ``tests`` tests: LCB's global timeout plus the start margin."""
    limit = global_timeout_s(tests) + START_MARGIN_S
    return SandboxConfig(cpu_seconds=limit, wall_seconds=limit, memory_mb=MEMORY_MB)


def lcb_code(prediction: str) -> str:
    """The code LCB runs for an answer (see the module docstring)."""
    if "```" not in prediction:
        return prediction.strip()
    with grader_import(LIVECODEBENCH):
        from livecodebench.lm_styles import LMStyle
        from livecodebench.utils.extraction_utils import extract_code
    return str(extract_code(prediction, LMStyle.OpenAIChat))


def _call(node: ast.AST) -> tuple[str, list[Any]] | None:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords):
        return None
    return node.func.attr, [ast.literal_eval(a) for a in node.args]


def functional_io(snippet: str) -> tuple[str, list[str], list[str]]:
    """``(fn_name, inputs, outputs)`` in LCB's call-based form from AFM's assert snippet.

    Each ``result = Solution().fn(args)`` (or ``x = fn(args)``) and the ``assert result == value``
    after it give one test: the arguments as JSON lines, the expected value as JSON. Raises
    ``ValueError`` on any other shape."""
    body = ast.parse(snippet).body
    fn_name: str | None = None
    inputs: list[str] = []
    outputs: list[str] = []
    pending: tuple[str, list[Any]] | None = None
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            call = _call(stmt.value)
            if call is None:
                raise ValueError(f"not a call: {ast.unparse(stmt.value)[:80]}")
            pending = call
        elif isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and pending is not None:
            compare = stmt.test
            if len(compare.ops) != 1 or not isinstance(compare.ops[0], ast.Eq):
                raise ValueError("the assert is not an equality")
            name, args = pending
            if fn_name not in (None, name):
                raise ValueError(f"two functions tested: {fn_name}, {name}")
            fn_name = name
            inputs.append("\n".join(json.dumps(a) for a in args))
            outputs.append(json.dumps(ast.literal_eval(compare.comparators[0])))
            pending = None
        else:
            raise ValueError(f"unexpected statement: {ast.unparse(stmt)[:80]}")
    if fn_name is None or not inputs:
        raise ValueError("no test in the snippet")
    return fn_name, inputs, outputs


def lcb_sample(test_cases: Mapping[str, Any]) -> dict[str, str]:
    """LCB's sample (``{"input_output": json}``) for a ``task.v1`` ``test_cases`` value."""
    if test_cases["kind"] == "functional":
        fn_name, inputs, outputs = functional_io(str(test_cases["functional"]))
        io: dict[str, Any] = {"inputs": inputs, "outputs": outputs, "fn_name": fn_name}
    else:
        io = {"inputs": list(test_cases["stdin"]), "outputs": list(test_cases["expected_output"])}
    return {"input_output": json.dumps(io)}


@dataclasses.dataclass(frozen=True)
class LCBResult:
    """The evaluator's outcome for one answer: passed, its per-test results (``True``, or LCB's
    codes: -1 global timeout, -2 wrong answer, -3 time limit, -4 runtime error) and why."""

    passed: bool
    results: tuple[bool | int, ...]
    tests_total: int
    reason: str

    @property
    def tests_run(self) -> int:
        return len(self.results)

    @property
    def detail(self) -> str:
        return f"{self.reason}; {self.tests_run}/{self.tests_total} tests run"


def _verdict(stdout: str) -> dict[str, Any] | None:
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        return None
    try:
        data = json.loads(lines[-1][len(MARKER) :])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("results"), list) else None


def run_sample(
    code: str, sample: Mapping[str, str], runner: ProgramRunner | None = None, timeout: int = TEST_TIMEOUT_S
) -> LCBResult:
    """LCB's ``check_correctness(sample, code)`` in the sandbox."""
    tests = len(json.loads(sample["input_output"])["inputs"])
    own = runner is None
    runner = runner or ProgramRunner(lcb_sandbox(tests))
    try:
        payload = json.dumps({"sample": dict(sample), "code": code, "timeout": timeout})
        result = runner.run(DRIVER, payload)
    finally:
        if own:
            runner.close(wait=False)
    data = _verdict(result.stdout)
    if data is None:  # the evaluator itself did not finish: all tests fail, as its global timeout
        why = result.killed_reason or f"exit {result.exit_code}"
        return LCBResult(False, tuple([-1] * tests), tests, f"evaluator did not finish ({why})")
    results = tuple(r if isinstance(r, bool | int) else bool(r) for r in data["results"])
    passed = bool(results) and all(r > 0 for r in results)
    meta = data.get("metadata") or {}
    reason = "all tests passed" if passed else str(meta.get("error_message") or "failed")
    return LCBResult(passed, results, tests, reason)


def run_lcb(prediction: str, test_cases: Mapping[str, Any], runner: ProgramRunner | None = None) -> LCBResult:
    """Score one code answer against a ``task.v1`` ``test_cases`` value with LCB's evaluator."""
    try:
        sample = lcb_sample(test_cases)
    except (ValueError, SyntaxError) as e:
        return LCBResult(False, (), 0, f"the task's functional test is not in LCB's form: {e}")
    return run_sample(lcb_code(prediction), sample, runner)


__all__ = [
    "DRIVER",
    "LCBResult",
    "TEST_TIMEOUT_S",
    "functional_io",
    "global_timeout_s",
    "lcb_code",
    "lcb_sample",
    "lcb_sandbox",
    "run_lcb",
    "run_sample",
]
