"""LiveCodeBench's test semantics, as its official evaluator defines them, run in the project sandbox.

A solution passes a problem when it passes **every** test; the evaluator stops at the first test
that fails (the rest are not run), and that first failure names the outcome. Per test:

* **stdin** problems: the program runs with the test's input on stdin under a per-test timeout
  (:data:`TEST_TIMEOUT_S`, 6 s, the evaluator's default). Its stdout and the expected output are
  each stripped as a whole, split into lines, and every line stripped of surrounding whitespace;
  the two must have the same number of lines, and each pair of lines must be equal, or else both
  lines must read as the same sequence of decimal numbers (each whitespace-separated token parsed
  as an exact decimal: ``1.0`` equals ``1``, ``0.50 2`` equals ``0.5 2``). A non-zero exit, a
  timeout or a killed process fails the test.
* **functional** (LeetCode-style) problems: the evaluator calls ``Solution().<fn_name>(*args)`` and
  compares the return value with the expected one. The AFM/Skywork files this project imports ship
  each functional test as that call followed by an ``assert`` on its result, so the test is the
  solution, behind LiveCodeBench's import prelude and the ``fn_name`` shim
  (:func:`coa.scoring.code.program_and_tests`), followed by the snippet: it passes when the program
  exits 0 within the timeout. (The evaluator turns a tuple result into a list before comparing;
  an assert against a list literal does not: a solution returning a tuple fails here.)

Model code runs only in the sandbox (:class:`coa.tools.harness_pool.ProgramRunner`: one sandbox
per scored answer, a fresh process and ``/tmp`` per test). No sandbox here raises
:class:`~coa.tools.sandbox.SandboxUnavailable` (exit code 3), never an unconfined run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from coa.scoring.code import program_and_tests
from coa.tools.code import AssertTest, IOTest
from coa.tools.harness_pool import ProgramRunner
from coa.tools.sandbox import SandboxConfig, SandboxResult

TEST_TIMEOUT_S = 6.0
"""Per-test limit of LiveCodeBench's evaluator (its ``timeout`` default), seconds."""
LCB_SANDBOX = SandboxConfig(cpu_seconds=TEST_TIMEOUT_S, wall_seconds=TEST_TIMEOUT_S, memory_mb=4096)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def lcb_outputs_match(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdout comparison (see the module docstring)."""
    got, want = _lines(actual), _lines(expected)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want, strict=True):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        if da is None or db is None or da != db:
            return False
    return True


@dataclasses.dataclass(frozen=True)
class LCBResult:
    """The outcome of one solution: passed, the tests run, and the first failure's reason."""

    passed: bool
    tests_run: int
    tests_total: int
    reason: str

    @property
    def detail(self) -> str:
        return f"{self.reason}; {self.tests_run}/{self.tests_total} tests run"


def _failure(result: SandboxResult) -> str | None:
    if result.exit_code != 0 and "SyntaxError" in result.stderr[-2000:]:
        return "compilation_error"
    if result.timed_out or result.killed_reason in ("wall_time", "cpu_time"):
        return "time_limit_exceeded"
    if result.killed_reason is not None:
        return str(result.killed_reason)
    if result.exit_code != 0:
        return "runtime_error"
    return None


def run_lcb(prediction: str, test_cases: Mapping[str, Any], runner: ProgramRunner | None = None) -> LCBResult:
    """Score one code answer against a ``task.v1`` ``test_cases`` value, LiveCodeBench's way."""
    program, tests = program_and_tests(prediction, test_cases)
    if not tests:
        return LCBResult(False, 0, 0, "no_tests")
    own = runner is None
    runner = runner or ProgramRunner(LCB_SANDBOX)
    try:
        for i, test in enumerate(tests):
            if isinstance(test, IOTest):
                result = runner.run(program, test.stdin)
                failure = _failure(result)
                wrong = result.stdout_truncated or not lcb_outputs_match(result.stdout, test.expected)
                if failure is None and wrong:
                    failure = "wrong_answer"
            else:
                assert isinstance(test, AssertTest)
                result = runner.run(f"{program.rstrip()}\n\n{test.snippet}\n", "")
                failure = _failure(result)
                if failure == "runtime_error" and "AssertionError" in result.stderr[-2000:]:
                    failure = "wrong_answer"
            if failure is not None:
                return LCBResult(False, i + 1, len(tests), f"test {i}: {failure}")
        return LCBResult(True, len(tests), len(tests), "all tests passed")
    finally:
        if own:
            runner.close(wait=False)
