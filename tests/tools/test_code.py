"""The code tool (payload parsing, AFM observation shapes, truncation) and the code-test runner."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from coa.format.code import extract_code
from coa.tools.code import (
    DEFAULT_MAX_CHARS,
    NO_CODE_OBSERVATION,
    AssertTest,
    IOTest,
    code_tool,
    format_observation,
    io_tests,
    make_code_tool,
    outputs_match,
    run_tests,
    run_tests_batch,
    truncate_content,
)
from coa.tools.harness_pool import ProgramRunner, SandboxPool, shared_pool
from coa.tools.sandbox import SandboxResult
from tests.tools.support import FAST, requires_sandbox

MARKER = "\n..._This content has been truncated to stay below 1536 characters_...\n"

# --------------------------------------------------------------------------------------------------
# Payload parsing


def test_extract_joins_python_blocks_and_uses_sh_blocks_as_stdin() -> None:
    payload = (
        "Let me compute.\n```python\nx = int(input())\n```\nthen\n```py\nprint(x * 2)\n```\n"
        "```sh\n21\n```\n```bash\nextra\n```"
    )
    got = extract_code(payload)
    assert got is not None
    assert got.code == "x = int(input())\n\nprint(x * 2)"
    assert got.stdin == "21\n\nextra\n"


def test_extract_strips_code_tags_and_keeps_text_after_answer() -> None:
    assert extract_code("<code>\n```python\nprint(1)\n```\n</code>") is not None
    got = extract_code("```python\nprint('old')\n```\n<answer>\n```python\nprint('new')\n```")
    assert got is not None and got.code == "print('new')"


def test_extract_falls_back_to_bare_fences_and_plain_python() -> None:
    bare = extract_code("```\nprint(3)\n```")
    assert bare is not None and bare.code == "print(3)"
    plain = extract_code("for i in range(2):\n    print(i)")
    assert plain is not None and plain.code == "for i in range(2):\n    print(i)" and plain.stdin == ""
    assert extract_code("Just some prose, no code at all.") is None
    assert extract_code("   ") is None


# --------------------------------------------------------------------------------------------------
# Observation shapes (no sandbox needed)


def _res(code: int = 0, out: str = "", err: str = "", **kw: object) -> SandboxResult:
    return SandboxResult(exit_code=code, stdout=out, stderr=err, **kw)  # type: ignore[arg-type]


def test_observation_success_shapes() -> None:
    assert format_observation(_res(0, "42\n")) == (
        "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"
    )
    assert (
        format_observation(_res(0, "", "a warning\n")) == "[EXECUTED] Code exited with status 0 (no output)."
    )


def test_observation_failure_shapes() -> None:
    assert format_observation(_res(1, "", "Traceback\nZeroDivisionError\n")) == (
        "[FAILED] Code exited with status 1.\n[STDERR:BEGIN]\nTraceback\nZeroDivisionError\n[STDERR:END]"
    )
    assert format_observation(_res(2)) == "[FAILED] Code exited with status 2 (no output)."
    assert format_observation(_res(3, "partial\n")) == (
        "[FAILED] Code exited with status 3.\n[STDOUT:BEGIN]\npartial\n[STDOUT:END]"
    )
    assert format_observation(_res(1, "out\n", "err\n")) == (
        "[FAILED] Code exited with status 1 with mixed output:\n"
        "[STDOUT:BEGIN]\nout\n[STDOUT:END]\n[STDERR:BEGIN]\nerr\n[STDERR:END]"
    )


def test_observation_explains_timeouts_and_limits() -> None:
    wall = format_observation(_res(-9, "", "", timed_out=True, killed_reason="wall_time"), FAST)
    assert wall.startswith("[FAILED] Code exited with status -9.\n[STDERR:BEGIN]\nTime out:")
    assert f"{FAST.wall_seconds:g} s wall-clock limit" in wall
    cpu = format_observation(_res(152, "tick\n", "", timed_out=True, killed_reason="cpu_time"), FAST)
    assert "with mixed output" in cpu and "CPU time" in cpu and "tick" in cpu
    mem = format_observation(_res(1, "", "MemoryError\n", killed_reason="memory"), FAST)
    assert mem.endswith("MemoryError\nMemory limit exceeded (512 MB address space).\n[STDERR:END]")


def test_truncate_content_matches_afm() -> None:
    short = "x" * DEFAULT_MAX_CHARS
    assert truncate_content(short) == short
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    cut = truncate_content(text)
    assert cut == text[:768] + MARKER + text[-768:]
    assert (
        truncate_content("abcdefghij", 4)
        == "ab\n..._This content has been truncated to stay below 4 characters_...\nij"
    )


def test_observation_is_truncated_in_the_middle() -> None:
    stdout = "\n".join(f"line {i}" for i in range(1000))
    obs = format_observation(_res(0, stdout))
    assert MARKER in obs
    assert obs.startswith("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\nline 0\n")
    assert obs.endswith("line 999\n[STDOUT:END]")
    assert len(obs) == DEFAULT_MAX_CHARS + len(MARKER)
    assert MARKER not in format_observation(_res(0, stdout), max_chars=None)


def test_outputs_match_compares_stripped_lines() -> None:
    assert outputs_match("1 2 \n3\n\n", "1 2\n3")
    assert outputs_match("  a\r\nb  ", "a\nb\n")
    assert not outputs_match("1\n2", "1\n3")
    assert not outputs_match("1\n2", "1 2")


# --------------------------------------------------------------------------------------------------
# The tool end to end


@requires_sandbox
def test_code_tool_runs_fenced_code_with_stdin() -> None:
    payload = "```python\nname = input()\nprint(f'hello {name}')\n```\n```sh\nworld\n```"
    assert (
        code_tool(payload, FAST)
        == "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\nhello world\n[STDOUT:END]"
    )
    assert code_tool("```python\nx = 1\n```", FAST) == "[EXECUTED] Code exited with status 0 (no output)."


@requires_sandbox
def test_code_tool_reports_errors_timeouts_and_missing_code() -> None:
    failed = code_tool("```python\nprint('before')\n1 / 0\n```", FAST)
    assert failed.startswith(
        "[FAILED] Code exited with status 1 with mixed output:\n[STDOUT:BEGIN]\nbefore\n"
    )
    assert "ZeroDivisionError: division by zero\n[STDERR:END]" in failed
    config = dataclasses.replace(FAST, wall_seconds=1)
    tool = make_code_tool(config)
    try:
        timeout = tool("```python\nimport time\ntime.sleep(30)\n```")
    finally:
        shared_pool(config).close()
    assert timeout.startswith("[FAILED] Code exited with status -9.\n[STDERR:BEGIN]\nTime out:")
    assert code_tool("I would like to think first.", FAST) == NO_CODE_OBSERVATION


@requires_sandbox
def test_make_code_tool_runs_calls_in_warm_sandboxes() -> None:
    payloads = [
        "```python\nname = input()\nprint(f'hello {name}')\n```\n```sh\nworld\n```",
        "```python\nopen('/tmp/state', 'w').write('x')\nprint('wrote')\n```",
        "```python\nimport os\nprint(os.listdir('/tmp'))\n1 / 0\n```",
    ]
    tool = make_code_tool(FAST, pool_size=1, programs_per_sandbox=3)
    pool = shared_pool(FAST, 1, 3)
    try:
        observations = []
        for payload in payloads:
            assert pool.wait_ready(), pool.last_error
            observations.append(tool(payload))
        assert (pool.hits, pool.misses, pool.reuses) == (3, 0, 2)  # the three calls in one sandbox
    finally:
        pool.close()
    assert observations == [code_tool(p, FAST) for p in payloads]  # same as a sandbox of its own
    assert "['workspace']" in observations[2]  # the earlier call's /tmp file is not there
    assert make_code_tool(FAST, pool_size=1, programs_per_sandbox=1)(payloads[2]) == observations[2]
    unpooled = make_code_tool(FAST, pool_size=0)
    assert unpooled(payloads[0]) == observations[0]


@requires_sandbox
def test_code_tool_truncates_huge_output() -> None:
    payload = "```python\nfor i in range(100000):\n    print(i)\n```"
    obs = code_tool(payload, dataclasses.replace(FAST, max_output_bytes=1024 * 1024))
    assert len(obs) == DEFAULT_MAX_CHARS + len(MARKER)
    assert obs.startswith("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n0\n1\n2\n")
    assert obs.endswith("99998\n99999\n[STDOUT:END]") and MARKER in obs
    # Past the capture cap (64 KiB here) the program is killed, and the observation says so.
    capped = code_tool(payload, FAST)
    assert capped.startswith("[FAILED] Code exited with status -9 with mixed output:\n[STDOUT:BEGIN]\n0\n")
    assert capped.endswith(
        "Output limit exceeded: the code printed more than 65536 bytes and was killed.\n[STDERR:END]"
    )
    assert len(capped) == DEFAULT_MAX_CHARS + len(MARKER)


# --------------------------------------------------------------------------------------------------
# run_tests

ADD_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"


@requires_sandbox
def test_run_tests_io_cases_pass_and_fail() -> None:
    tests = [IOTest("1 2\n", "3\n"), IOTest("10 5", "15  \n\n"), IOTest("2 2\n", "5")]
    report = run_tests(ADD_STDIN, tests, FAST)
    assert [c.passed for c in report.cases] == [True, True, False]
    assert report.cases[2].reason == "wrong_answer"
    assert not report.all_passed and report.passed == 2 and report.total == 3
    assert run_tests(ADD_STDIN, tests[:2], FAST).all_passed


@requires_sandbox
def test_run_tests_runtime_errors_and_timeouts_fail() -> None:
    crash = run_tests("raise SystemExit(input())", [IOTest("boom", "boom")], FAST)
    assert not crash.all_passed and crash.cases[0].reason == "runtime_error"
    slow = run_tests(
        "while True:\n    pass", [IOTest("", "")], dataclasses.replace(FAST, cpu_seconds=1, wall_seconds=5)
    )
    assert not slow.all_passed and slow.cases[0].reason == "timeout"


@requires_sandbox
def test_run_tests_functional_asserts() -> None:
    code = "```python\ndef square(x):\n    return x * x\n```"  # fenced answers are extracted
    report = run_tests(code, [AssertTest("assert square(3) == 9"), "assert square(-2) == 4"], FAST)
    assert report.all_passed, report
    wrong = run_tests(code, ["assert square(3) == 9", {"assert": "assert square(2) == 5"}], FAST)
    assert [c.passed for c in wrong.cases] == [True, False]
    assert wrong.cases[1].reason == "wrong_answer" and wrong.cases[1].kind == "assert"


@requires_sandbox
def test_run_tests_mappings_fail_fast_and_parallel() -> None:
    tests = [{"input": "1 1", "output": "3"}, {"input": "2 3", "output": "5"}]
    stopped = run_tests(ADD_STDIN, tests, FAST, fail_fast=True)
    assert [c.reason for c in stopped.cases] == ["wrong_answer", "skipped"]
    parallel = run_tests(ADD_STDIN, io_tests(["1 1", "2 3", "4 4"], ["2", "5", "8"]), FAST, max_workers=2)
    assert parallel.all_passed and [c.index for c in parallel.cases] == [0, 1, 2]


@requires_sandbox
def test_each_failure_fails_only_its_own_test_in_one_sandbox() -> None:
    code = textwrap.dedent(
        """
        import os, time
        what = input().strip()
        if what == "crash":
            raise RuntimeError("boom")
        if what == "hang":
            time.sleep(60)
        if what == "spin":
            while True:
                pass
        if what == "bomb":
            while True:
                os.fork()
        if what == "hog":
            x = bytearray(2 * 1024 ** 3)
        if what == "kill":
            os.kill(os.getppid(), 9)
            time.sleep(60)
        print("fine")
        """
    )
    names = ["crash", "hang", "spin", "bomb", "hog", "kill", "ok"]
    config = dataclasses.replace(FAST, cpu_seconds=1, wall_seconds=4, memory_mb=256)  # 1 s CPU < 4 s wall
    with ProgramRunner(config) as runner:
        report = run_tests(code, [IOTest(n, "fine") for n in names], runner=runner)
        assert runner.sandboxes_started == 2  # one start for all, plus one after "kill" took the harness
    reasons = [c.reason for c in report.cases]
    assert reasons == ["runtime_error", "timeout", "timeout", "process_limit", "memory", "signal", "passed"]
    cases = {n: c.result for n, c in zip(names, report.cases, strict=True)}
    assert cases["hang"] is not None and cases["hang"].killed_reason == "wall_time"
    assert cases["spin"] is not None and cases["spin"].killed_reason == "cpu_time"
    assert cases["crash"] is not None and "RuntimeError: boom" in cases["crash"].stderr


@requires_sandbox
def test_run_tests_reuses_a_callers_runner() -> None:
    with ProgramRunner(FAST) as runner:
        first = run_tests(ADD_STDIN, io_tests(["1 2", "3 4"], ["3", "7"]), runner=runner)
        second = run_tests(
            "def f(x):\n    return x\n", ["assert f(1) == 1", "assert f(2) == 3"], runner=runner
        )
        assert runner.sandboxes_started == 1 and runner.programs == 4
    assert first.all_passed and [c.reason for c in second.cases] == ["passed", "wrong_answer"]


@requires_sandbox
def test_run_tests_on_a_pool_gives_its_sandbox_back() -> None:
    jobs: list[tuple[str, list]] = [
        (ADD_STDIN, io_tests(["1 2", "3 4"], ["3", "7"])),
        ("def f(x):\n    return x\n", ["assert f(1) == 1", "assert f(2) == 3"]),
        (
            "import os\nopen('/tmp/left', 'w').write('x')\n"
            "assert sorted(os.listdir('/tmp')) == ['left', 'workspace']",
            ["pass"],
        ),
        ("import os; assert os.listdir('/tmp') == ['workspace'], os.listdir('/tmp')", ["pass"]),
    ]
    with SandboxPool(FAST, size=1, programs_per_sandbox=64) as pool:
        assert pool.wait_ready(), pool.last_error
        pooled = [run_tests(code, tests, fail_fast=True, pool=pool) for code, tests in jobs]
        assert pool.misses == 0 and pool.reuses == 3  # the four runs in one sandbox
    single = [run_tests(code, tests, FAST, fail_fast=True) for code, tests in jobs]
    assert [[(c.passed, c.reason) for c in r.cases] for r in pooled] == [
        [(c.passed, c.reason) for c in r.cases] for r in single
    ]
    assert [r.all_passed for r in pooled] == [True, False, True, True]  # the fourth saw a clean /tmp


@requires_sandbox
def test_run_tests_batch_matches_run_tests() -> None:
    jobs: list[tuple[str, list]] = [
        (ADD_STDIN, io_tests(["1 2", "3 4"], ["3", "7"])),
        (ADD_STDIN, io_tests(["1 2", "3 4", "5 5"], ["3", "8", "10"])),
        ("raise SystemExit(input())", [IOTest("x", "x")]),
        ("def square(x):\n    return x * x\n", ["assert square(3) == 9", "assert square(2) == 5"]),
        ("print(1)", []),
    ]
    for fail_fast in (False, True):
        batch = run_tests_batch(jobs, FAST, fail_fast=fail_fast, workers=2, programs_per_sandbox=3)
        single = [run_tests(code, tests, FAST, fail_fast=fail_fast) for code, tests in jobs]
        assert len(batch) == len(jobs)
        for got, want in zip(batch, single, strict=True):
            assert [(c.index, c.passed, c.reason) for c in got.cases] == [
                (c.index, c.passed, c.reason) for c in want.cases
            ]
    assert [r.passed for r in batch] == [2, 1, 0, 1, 0]
    assert [c.reason for c in batch[1].cases] == ["passed", "wrong_answer", "skipped"]  # fail_fast
    with pytest.raises(ValueError, match="programs_per_sandbox"):
        run_tests_batch(jobs, FAST, programs_per_sandbox=0)


def test_run_tests_without_tests_is_not_a_pass() -> None:
    report = run_tests("print(1)", [], FAST)
    assert not report.all_passed and report.total == 0 and report.pass_rate == 0.0
    with pytest.raises(TypeError, match="unsupported test"):
        run_tests("print(1)", [{"foo": "bar"}], FAST)
    with pytest.raises(ValueError):
        io_tests(["1"], [])
