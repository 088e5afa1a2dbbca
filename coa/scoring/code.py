"""Code answers against a task's tests: stdin/stdout tests, and functional tests through a harness.

A ``task.v1`` code task holds either stdin/stdout pairs or one ``functional`` assert snippet
(LiveCodeBench's LeetCode-style problems: ``result = Solution().fn(...)`` then an ``assert``).
:func:`program_and_tests` turns a prediction into the program and the tests that
:func:`coa.tools.code.run_tests` runs in the sandbox:

* stdin tests: the prediction's code, one :class:`~coa.tools.code.IOTest` per pair;
* functional tests (the ``fn_name`` harness): the program starts with the imports LiveCodeBench's
  own harness gives every solution (``from typing import *`` for ``List[int]`` annotations, and the
  usual standard modules); and when the solution defines the starter's function ``fn_name`` at
  top level rather than inside ``class Solution``, a ``Solution`` class that exposes it is added,
  so ``Solution().fn_name(...)`` calls it. The assert snippet is appended as the one test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coa.format.code import extract_code
from coa.tools.code import AssertTest, CodeTest, io_tests

PRELUDE = (
    "from typing import *\n"
    "import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re, string, sys\n"
    "from collections import Counter, defaultdict, deque, OrderedDict\n"
    "from functools import lru_cache, cache, reduce\n"
    "from itertools import accumulate, combinations, permutations, product\n"
    "from heapq import heappush, heappop, heapify\n"
    "from bisect import bisect_left, bisect_right, insort\n"
    "from math import inf, gcd, sqrt, ceil, floor, comb\n"
)
"""What LiveCodeBench's harness puts before a functional solution (its ``import_string``)."""


def solution_shim(fn_name: str) -> str:
    """Code that gives a top-level ``fn_name`` a ``Solution`` class when the answer has none."""
    return (
        f"\nif 'Solution' not in globals() and callable(globals().get({fn_name!r})):\n"
        f"    class Solution:\n"
        f"        {fn_name} = staticmethod(globals()[{fn_name!r}])\n"
    )


def program_and_tests(prediction: str, test_cases: Mapping[str, Any]) -> tuple[str, list[CodeTest]]:
    """The program to run and its tests, for a code prediction and a ``task.v1`` ``test_cases``."""
    extracted = extract_code(prediction) if "```" in prediction else None
    code = extracted.code if extracted is not None else prediction
    if test_cases["kind"] != "functional":
        return code, list(io_tests(test_cases["stdin"], test_cases["expected_output"]))
    fn_name = test_cases.get("fn_name")
    program = PRELUDE + "\n" + code.rstrip() + "\n"
    if fn_name:
        program += solution_shim(str(fn_name))
    return program, [AssertTest(str(test_cases["functional"]))]
