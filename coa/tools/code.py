"""The ``code`` tool and the code-test runner, on top of :mod:`coa.tools.sandbox`.

* The code it runs is what :func:`coa.format.code.extract_code` (the CoA format's parser) reads in
  a ``<code>`` payload.
* :func:`format_observation` renders a :class:`~coa.tools.sandbox.SandboxResult` in AFM's
  observation shapes (``[EXECUTED] Code exited with status 0.`` + ``[STDOUT:BEGIN]…[STDOUT:END]``,
  ``… (no output).``, ``[FAILED] Code exited with status N.`` with a STDERR or STDOUT block, or
  ``with mixed output:`` and both). A limit that ended the run (wall/CPU time, memory, processes,
  output size) is explained on the stderr side. The whole observation is then middle-truncated to
  ``max_chars`` (default 1536 = AFM's ``512 * 3``) with AFM's marker.
* :func:`code_tool` / :func:`make_code_tool`: payload in, observation out (``str -> str``, the
  shape :class:`coa.tools.toolbox.FunctionToolBox` expects). ``make_code_tool`` runs each call in
  a warm sandbox of a :class:`~coa.tools.harness_pool.SandboxPool` (started ahead, then reused for
  up to ``programs_per_sandbox`` calls, each program a fresh process with a clean ``/tmp``). They
  raise :class:`~coa.tools.sandbox.SandboxUnavailable` rather than ever running code unconfined.
* :func:`run_tests`: code-test scoring. stdin/expected-stdout cases (:class:`IOTest`, compared as
  stripped lines) and functional cases (:class:`AssertTest`: the code with an assert snippet
  appended, passing when it exits 0). The reward is ``report.all_passed``. All tests of a run
  share one sandbox start, each test a fresh process with a fresh ``/tmp``
  (:mod:`coa.tools.sandbox_harness`); :func:`run_tests_batch` scores many runs on a few long-lived
  sandboxes, which is what makes scoring cheap (see ``bench/bench_sandbox.py``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from coa.format.code import extract_code
from coa.tools.harness_pool import PROGRAMS_PER_SANDBOX, ProgramRunner, SandboxPool, shared_pool
from coa.tools.sandbox import SandboxConfig, SandboxResult, run_python

__all__ = [
    "DEFAULT_MAX_CHARS",
    "TEST_CONFIG",
    "AssertTest",
    "CaseResult",
    "IOTest",
    "NO_CODE_OBSERVATION",
    "CodeTest",
    "RunTestsReport",
    "code_tool",
    "format_observation",
    "io_tests",
    "make_code_tool",
    "outputs_match",
    "run_tests",
    "run_tests_batch",
    "truncate_content",
]

DEFAULT_MAX_CHARS = 1536
"""AFM's observation budget for the code tool (``512 * 3`` characters)."""

TEST_CONFIG = SandboxConfig(cpu_seconds=6, wall_seconds=10)
"""Default limits per test case (AFM/skywork give each test a 6 s timeout)."""

_LIMIT_NOTES = {
    "wall_time": "Time out: the code ran past the {wall:g} s wall-clock limit and was killed. "
    "Check for infinite loops, blocked I/O (e.g., input()), or deadlocks.",
    "cpu_time": "Time out: the code used more than {cpu:g} s of CPU time and was killed. "
    "Check for infinite loops or an algorithm that is too slow.",
    "memory": "Memory limit exceeded ({mem} MB address space).",
    "process_limit": "Process limit exceeded (at most {procs} processes/threads).",
    "file_size": "File size limit exceeded (files of at most {fsize} MB).",
    "output_limit": "Output limit exceeded: the code printed more than {out} bytes and was killed.",
}


def truncate_content(content: str, max_length: int = DEFAULT_MAX_CHARS) -> str:
    """AFM's (smolagents') middle truncation: head, marker, tail; unchanged when short enough."""
    if len(content) <= max_length:
        return content
    return (
        content[: max_length // 2]
        + f"\n..._This content has been truncated to stay below {max_length} characters_...\n"
        + content[-max_length // 2 :]
    )


def _limit_note(result: SandboxResult, config: SandboxConfig) -> str | None:
    template = _LIMIT_NOTES.get(result.killed_reason or "")
    if template is None:
        return None
    return template.format(
        wall=config.wall_seconds,
        cpu=config.cpu_seconds,
        mem=config.memory_mb,
        procs=config.max_processes,
        fsize=config.max_file_mb,
        out=config.max_output_bytes,
    )


def format_observation(
    result: SandboxResult, config: SandboxConfig | None = None, max_chars: int | None = DEFAULT_MAX_CHARS
) -> str:
    """AFM's observation string for a run, middle-truncated to ``max_chars`` (``None``: no cut)."""
    config = config or SandboxConfig()
    stdout, stderr = result.stdout, result.stderr
    if result.stdout_truncated:
        stdout = stdout.rstrip("\n") + f"\n[output truncated at {config.max_output_bytes} bytes]"
    if result.stderr_truncated:
        stderr = stderr.rstrip("\n") + f"\n[output truncated at {config.max_output_bytes} bytes]"
    note = _limit_note(result, config)
    if note:
        stderr = f"{stderr.rstrip()}\n{note}" if stderr.strip() else note
    out_block = f"[STDOUT:BEGIN]\n{stdout.strip()}\n[STDOUT:END]"
    err_block = f"[STDERR:BEGIN]\n{stderr.strip()}\n[STDERR:END]"
    status = result.exit_code
    if result.ok:
        obs = (
            f"[EXECUTED] Code exited with status 0.\n{out_block}"
            if stdout
            else "[EXECUTED] Code exited with status 0 (no output)."
        )
    elif not stdout and stderr:
        obs = f"[FAILED] Code exited with status {status}.\n{err_block}"
    elif not stdout and not stderr:
        obs = f"[FAILED] Code exited with status {status} (no output)."
    elif stdout and not stderr:
        obs = f"[FAILED] Code exited with status {status}.\n{out_block}"
    else:
        obs = f"[FAILED] Code exited with status {status} with mixed output:\n{out_block}\n{err_block}"
    return truncate_content(obs, max_chars) if max_chars is not None else obs


NO_CODE_OBSERVATION = (
    "[FAILED] No Python code found. Put the code in a fenced block: ```py\\n...\\n``` "
    "(and any stdin in a ```sh\\n...\\n``` block)."
)


def code_tool(
    payload: str,
    config: SandboxConfig | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
    pool: SandboxPool | None = None,
) -> str:
    """Run the code of a ``<code>`` payload in the sandbox and return the observation string.

    With ``pool`` the code runs in one of its warm sandboxes (a fresh process there, nothing left
    from an earlier call), else in a sandbox started for it. Raises
    :class:`~coa.tools.sandbox.SandboxUnavailable` when no sandbox works here.
    """
    extracted = extract_code(payload)
    if extracted is None:
        return truncate_content(NO_CODE_OBSERVATION, max_chars) if max_chars else NO_CODE_OBSERVATION
    if pool is not None:
        config = pool.config
        result = pool.run(extracted.code, extracted.stdin)
    else:
        config = config or SandboxConfig()
        result = run_python(extracted.code, stdin=extracted.stdin, config=config)
    return format_observation(result, config, max_chars)


def make_code_tool(
    config: SandboxConfig | None = None,
    max_chars: int | None = DEFAULT_MAX_CHARS,
    pool_size: int = 2,
    programs_per_sandbox: int = PROGRAMS_PER_SANDBOX,
) -> Callable[[str], str]:
    """A ``str -> str`` code tool with fixed limits, for :class:`coa.tools.toolbox.FunctionToolBox`.

    ``pool_size > 0``: calls run in warm sandboxes of the process-wide pool for ``config``
    (:func:`~coa.tools.harness_pool.shared_pool`, whose sandboxes start now, in the background),
    each sandbox reused for up to ``programs_per_sandbox`` calls (1: a fresh sandbox per call);
    ``0``: every call starts its own sandbox.
    """
    config = config or SandboxConfig()
    if pool_size > 0:
        shared_pool(config, pool_size, programs_per_sandbox)  # start warming up before the first call

    def code(payload: str) -> str:
        pool = shared_pool(config, pool_size, programs_per_sandbox) if pool_size > 0 else None
        return code_tool(payload, config, max_chars, pool)

    return code


# --------------------------------------------------------------------------------------------------
# Code-test scoring


@dataclasses.dataclass(frozen=True)
class IOTest:
    """Run the program with ``stdin``; it passes when it exits 0 and its stdout matches ``expected``."""

    stdin: str
    expected: str


@dataclasses.dataclass(frozen=True)
class AssertTest:
    """Append ``snippet`` (e.g. ``assert f(2) == 4``) to the program; it passes when that exits 0."""

    snippet: str


CodeTest = IOTest | AssertTest


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One test's verdict. ``reason``: ``passed``, ``wrong_answer``, ``runtime_error``, ``timeout``,
    ``memory``, ``output_limit``, … (the sandbox's ``killed_reason``), or ``skipped``."""

    index: int
    kind: Literal["io", "assert"]
    passed: bool
    reason: str
    result: SandboxResult | None = None


@dataclasses.dataclass(frozen=True)
class RunTestsReport:
    """All test verdicts; ``all_passed`` is False when there are no tests (nothing was verified)."""

    cases: tuple[CaseResult, ...]

    @property
    def all_passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.cases else 0.0


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()]


def outputs_match(actual: str, expected: str) -> bool:
    """Stdout comparison for :class:`IOTest`: equal after stripping each line and the whole text."""
    return _lines(actual) == _lines(expected)


def _as_case(test: CodeTest | Mapping[str, str] | str) -> CodeTest:
    if isinstance(test, IOTest | AssertTest):
        return test
    if isinstance(test, str):
        return AssertTest(test)
    if isinstance(test, Mapping):
        if "assert" in test:
            return AssertTest(str(test["assert"]))
        stdin = test.get("input", test.get("stdin"))
        expected = test.get("output", test.get("expected"))
        if stdin is not None and expected is not None:
            return IOTest(str(stdin), str(expected))
    raise TypeError(
        f"unsupported test {test!r}: use IOTest/AssertTest, an assert snippet, "
        "{'input': ..., 'output': ...} or {'assert': ...}"
    )


def _reason(result: SandboxResult) -> str:
    if result.timed_out:
        return "timeout"
    if result.killed_reason is not None:
        return result.killed_reason
    return "runtime_error"


def _program(case: CodeTest, code: str) -> tuple[str, str]:
    """``(source, stdin)`` that checks ``case``: the code with its stdin, or with the assert appended."""
    if isinstance(case, IOTest):
        return code, case.stdin
    return f"{code.rstrip()}\n\n{case.snippet}\n", ""


def _verdict(index: int, case: CodeTest, result: SandboxResult) -> CaseResult:
    if isinstance(case, IOTest):
        if not result.ok:
            return CaseResult(index, "io", False, _reason(result), result)
        if result.stdout_truncated or not outputs_match(result.stdout, case.expected):
            return CaseResult(index, "io", False, "wrong_answer", result)
        return CaseResult(index, "io", True, "passed", result)
    if not result.ok:
        reason = "wrong_answer" if "AssertionError" in result.stderr[-2000:] else _reason(result)
        return CaseResult(index, "assert", False, reason, result)
    return CaseResult(index, "assert", True, "passed", result)


def _skipped(index: int, case: CodeTest) -> CaseResult:
    return CaseResult(index, "io" if isinstance(case, IOTest) else "assert", False, "skipped")


def _prepare(code: str, tests: Iterable[CodeTest | Mapping[str, str] | str]) -> tuple[str, list[CodeTest]]:
    cases = [_as_case(t) for t in tests]
    if "```" in code:
        extracted = extract_code(code)
        code = extracted.code if extracted is not None else code
    return code, cases


def _run_cases(
    runner: ProgramRunner, code: str, cases: Sequence[CodeTest], first: int, fail_fast: bool
) -> list[CaseResult]:
    results: list[CaseResult] = []
    for i, case in enumerate(cases, start=first):
        if fail_fast and results and not results[-1].passed:
            results.append(_skipped(i, case))
            continue
        results.append(_verdict(i, case, runner.run(*_program(case, code))))
    return results


def run_tests(
    code: str,
    tests: Iterable[CodeTest | Mapping[str, str] | str],
    config: SandboxConfig | None = None,
    *,
    fail_fast: bool = False,
    max_workers: int = 1,
    runner: ProgramRunner | None = None,
    pool: SandboxPool | None = None,
) -> RunTestsReport:
    """Run ``code`` against each test, each test as its own fresh, limited sandboxed process.

    ``code`` may be plain source or text with fenced ```` ```python ```` blocks (extracted as in
    :func:`extract_code`). Tests are :class:`IOTest`/:class:`AssertTest`, ``{"input", "output"}`` /
    ``{"assert"}`` mappings or bare assert snippets. All tests run in one sandbox start
    (:class:`~coa.tools.harness_pool.ProgramRunner`: a fresh process, working directory and
    ``/tmp`` per test, nothing left over from the previous test), or in ``runner``'s sandbox when
    one is given (the caller's, reused across calls; ``config`` is then the runner's), or in a
    sandbox of ``pool`` that goes back to it afterwards (``config`` is then the pool's). ``fail_fast``
    stops at the first failure (the rest are ``skipped``; sequential only). ``max_workers > 1``
    spreads the tests over that many sandboxes run in parallel. Raises
    :class:`~coa.tools.sandbox.SandboxUnavailable` when no sandbox works here.
    """
    code, cases = _prepare(code, tests)
    if runner is not None:
        return RunTestsReport(tuple(_run_cases(runner, code, cases, 0, fail_fast)))
    config = config or TEST_CONFIG
    if not cases:
        return RunTestsReport(())
    if pool is not None:
        with pool.runner() as pooled:
            return RunTestsReport(tuple(_run_cases(pooled, code, cases, 0, fail_fast)))
    if fail_fast or max_workers <= 1 or len(cases) <= 1:
        own = ProgramRunner(config)
        try:
            return RunTestsReport(tuple(_run_cases(own, code, cases, 0, fail_fast)))
        finally:
            own.close(wait=False)  # its programs are gone already; the idle harness exits meanwhile
    shards = [list(range(k, len(cases), max_workers)) for k in range(min(max_workers, len(cases)))]

    def shard(indices: list[int]) -> list[CaseResult]:
        own = ProgramRunner(config)
        try:
            return [_verdict(i, cases[i], own.run(*_program(cases[i], code))) for i in indices]
        finally:
            own.close(wait=False)

    with ThreadPoolExecutor(max_workers=len(shards)) as executor:
        done = [r for rs in executor.map(shard, shards) for r in rs]
    return RunTestsReport(tuple(sorted(done, key=lambda c: c.index)))


def run_tests_batch(
    jobs: Iterable[tuple[str, Iterable[CodeTest | Mapping[str, str] | str]]],
    config: SandboxConfig | None = None,
    *,
    fail_fast: bool = False,
    workers: int = 2,
    programs_per_sandbox: int = 512,
) -> list[RunTestsReport]:
    """:func:`run_tests` for many ``(code, tests)`` runs: one report per run, in order.

    ``workers`` threads each keep ONE sandbox and run their share of the runs in it, one test
    after another, each test a fresh process with a fresh ``/tmp`` exactly as within one run (so
    the sandbox start is paid once per ``programs_per_sandbox`` tests rather than once per run). A
    sandbox whose harness is lost is replaced at once. Raises
    :class:`~coa.tools.sandbox.SandboxUnavailable` when no sandbox works here.
    """
    if programs_per_sandbox < 1:
        raise ValueError(f"programs_per_sandbox must be >= 1, got {programs_per_sandbox}")
    config = config or TEST_CONFIG
    prepared = [_prepare(code, tests) for code, tests in jobs]
    reports: list[RunTestsReport | None] = [None] * len(prepared)
    next_job = iter(range(len(prepared)))
    lock = threading.Lock()

    def worker() -> None:
        runner = ProgramRunner(config)
        try:
            while True:
                with lock:
                    index = next(next_job, None)
                if index is None:
                    return
                code, cases = prepared[index]
                if runner.programs >= programs_per_sandbox:
                    runner.close()
                reports[index] = RunTestsReport(tuple(_run_cases(runner, code, cases, 0, fail_fast)))
        finally:
            runner.close()

    threads = max(1, min(workers, len(prepared)))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(worker) for _ in range(threads)]:
            future.result()
    return [r for r in reports if r is not None]


def io_tests(inputs: Sequence[str], outputs: Sequence[str]) -> list[IOTest]:
    """Pair up ``inputs``/``outputs`` lists (the ``ground_truth`` layout of stdin/stdout problems)."""
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return [IOTest(i, o) for i, o in zip(inputs, outputs, strict=True)]
