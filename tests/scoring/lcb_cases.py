"""Generated LiveCodeBench answers for the conformance test (``test_livecodebench.py``).

Each case is a model response (fenced, as a chat model answers LiveCodeBench), the task's tests in
AFM's ``task.v1`` form (stdin/expected lists, or the ``result = Solution().f(...)`` + ``assert``
snippet) and the same tests in LiveCodeBench's own form (``input_output`` JSON, call-based with
``fn_name``), which the publisher's evaluator is given directly.

* stdin programs: every way Python reads stdin × every way it prints, plus program shapes (a
  ``__main__`` guard, ``exit()`` after the output, two code blocks, a crash, float output);
* functional programs: every container a function returns (list, tuple, nested tuples, set,
  generator, numbers of another type, ``None``), as a method of ``Solution`` or a top-level function.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

READERS = {
    "input": "a, b = map(int, input().split())",
    "readline": "import sys\na, b = map(int, sys.stdin.readline().split())",
    "read": "import sys\na, b = map(int, sys.stdin.read().split())",
    "readlines": "import sys\na, b = map(int, sys.stdin.readlines()[0].split())",
    "buffer": "import sys\na, b = map(int, sys.stdin.buffer.read().split())",
    "buffer_readline": "import sys\na, b = map(int, sys.stdin.buffer.readline().split())",
    "open0": "a, b = map(int, open(0).read().split())",
    "iterate": "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    break",
    "os_read": "import os\na, b = map(int, os.read(0, 1 << 16).split())",
}
WRITERS = {
    "print": "print(a + b)",
    "write": "import sys\nsys.stdout.write(f'{a + b}\\n')",
    "print_end": "print(a + b, end='')",
    "print_flush": "print(a + b, flush=True)",
    "buffer_write": "import sys\nsys.stdout.buffer.write(f'{a + b}\\n'.encode())",
    "os_write": "import os\nos.write(1, f'{a + b}\\n'.encode())",
    "print_float": "print(float(a + b))",
}
SHAPES = {
    "main_guard": "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\n"
    "if __name__ == '__main__':\n    main()",
    "exit_after": "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)",
    "quit_after": "a, b = map(int, input().split())\nprint(a + b)\nexit()",
    "crash": "a, b = map(int, input().split())\nprint(a + b)\nraise ValueError('late')",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)",
    "extra_line": "a, b = map(int, input().split())\nprint(a + b)\nprint()",
    "stderr": "import sys\na, b = map(int, input().split())\nprint(a + b, file=sys.stderr)",
}
STDIN_IN = ["1 2\n", "30 4\n"]
STDIN_OUT = ["3\n", "34\n"]


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


def stdin_cases() -> list[dict[str, Any]]:
    tests = {"kind": "stdin", "stdin": STDIN_IN, "expected_output": STDIN_OUT, "functional": None,
             "fn_name": None, "starter_code": None}  # fmt: skip
    lcb = {"inputs": STDIN_IN, "outputs": STDIN_OUT}
    cases = []
    for (rname, reader), (wname, writer) in itertools.product(READERS.items(), WRITERS.items()):
        cases.append({"name": f"{rname}+{wname}", "response": fenced(f"{reader}\n{writer}")})
    for name, code in SHAPES.items():
        cases.append({"name": name, "response": fenced(code)})
    right, wrong = SHAPES["main_guard"], SHAPES["wrong"]
    cases.append({"name": "two_blocks_last_right", "response": fenced(wrong) + "\nBetter:\n" + fenced(right)})
    cases.append({"name": "two_blocks_last_wrong", "response": fenced(right) + "\nOr:\n" + fenced(wrong)})
    return [dict(c, tests=tests, lcb=lcb) for c in cases]


def functional_cases() -> list[dict[str, Any]]:
    cases = []
    args = [3, 10]
    for (name, ret), top_level in itertools.product(
        {
            "list": "[x, x + 1]",
            "tuple": "(x, x + 1)",
            "list_of_tuples": "[(x, x + 1)]",
            "set": "{x, x + 1}",
            "generator": "(v for v in [x, x + 1])",
            "none": "None",
            "floats": "[x * 1.0, x + 1.0]",
            "str": "str([x, x + 1])",
        }.items(),  # fmt: skip
        (False, True),
    ):
        expected = [[[a, a + 1]] if name == "list_of_tuples" else [a, a + 1] for a in args]
        message = 'f"Expected {e!r}, but got {{repr(result)}}"'
        snippet = "".join(
            f"\nresult = Solution().pair({a})\nassert result == {e!r}, " + message.format(e=e) + "\n"
            for a, e in zip(args, expected, strict=True)
        )
        body = f"def pair(x):\n    return {ret}" if top_level else (
            f"class Solution:\n    def pair(self, x: int) -> List[int]:\n        return {ret}"
        )  # fmt: skip
        tests = {"kind": "functional", "stdin": None, "expected_output": None, "fn_name": "pair",
                 "functional": snippet, "starter_code": None}  # fmt: skip
        lcb = {
            "inputs": [json.dumps(a) for a in args],
            "outputs": [json.dumps(e) for e in expected],
            "fn_name": "pair",
        }
        cases.append({"name": f"{name}{'_toplevel' if top_level else ''}", "response": fenced(body),
                      "tests": tests, "lcb": lcb})  # fmt: skip
    return cases


def all_cases() -> list[dict[str, Any]]:
    return stdin_cases() + functional_cases()
