"""The programming specs behind the ``code`` family: parameterised problems with reference programs.

Each :class:`Spec` (:data:`SPECS`: digit sums in a base, reversing words, counting vowels or one
letter, FizzBuzz variants, run-length encoding, sums of multiples, Caesar shifts, list rotation, …)
says how to state a problem for its parameters, gives the reference program (only ``input()`` and
``print()``) and draws ``N_TESTS`` stdin texts, the example first and edge cases next. The questions,
tests and task rows made from them are :mod:`coa.synthetic.programming`.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import string
from collections.abc import Callable
from typing import Any

N_TESTS = 5

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Spec:
    """One programming problem with parameters: how to state it, solve it and test it."""

    id: str
    space: Callable[[], list[Params]]
    """Every parameter combination, in a fixed order."""
    describe: Callable[[Params], str]
    source: Callable[[Params], str]
    """The reference program for the parameters (reads with ``input()``, writes with ``print()``)."""
    inputs: Callable[[random.Random, Params], list[str]]
    """``N_TESTS`` stdin texts: the first is the example shown, edge cases come next."""


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 7)))
        for _ in range(rng.randint(lo, hi))
    )


def _ints(rng: random.Random, lo: int, hi: int, count_lo: int, count_hi: int) -> str:
    return " ".join(str(rng.randint(lo, hi)) for _ in range(rng.randint(count_lo, count_hi)))


def _line(text: str) -> str:
    return text + "\n"


_SEPARATORS = {
    "a single space": " ",
    "a comma": ",",
    "a hyphen": "-",
    "a vertical bar": "|",
    "a semicolon": ";",
}
_CASES = {"unchanged": "", "in upper case": ".upper()", "in lower case": ".lower()"}
_FIZZ_WORDS = ("Fizz", "Buzz", "Ping", "Pong", "Zip", "Zap")
_POWERS = {2: "squares", 3: "cubes", 4: "fourth powers", 5: "fifth powers"}
_YES_NO = (("YES", "NO"), ("yes", "no"), ("True", "False"), ("1", "0"))


def _digit_sum() -> Spec:
    return Spec(
        "digit_sum",
        lambda: [{"base": b} for b in range(2, 11)],
        lambda p: (
            f"Read a non-negative integer n and print the sum of the digits of n written in base {p['base']}."
        ),
        lambda p: (
            f"n = int(input())\ntotal = 0\nwhile n > 0:\n    total += n % {p['base']}\n"
            f"    n //= {p['base']}\nprint(total)\n"
        ),
        lambda rng, p: (
            [_line(str(rng.randint(100, 10**6))), "0\n", _line(str(p["base"]))]
            + [_line(str(rng.randint(1, 10**12))) for _ in range(N_TESTS - 3)]
        ),
    )


def _reverse_words() -> Spec:
    return Spec(
        "reverse_words",
        lambda: [{"sep": s, "case": c} for s in _SEPARATORS for c in _CASES],
        lambda p: (
            "Read a line of words separated by single spaces and print the words in reverse order, "
            f"joined by {p['sep']}, with the letters {p['case']}."
        ),
        lambda p: (
            "words = input().split()\n"
            f"print({_SEPARATORS[p['sep']]!r}.join(words[::-1]){_CASES[p['case']]})\n"
        ),
        lambda rng, p: (
            [_line(_words(rng, 3, 5)), "one\n", _line("Hello World Again")]
            + [_line(_words(rng, 2, 9)) for _ in range(N_TESTS - 3)]
        ),
    )


def _count_vowels() -> Spec:
    def source(p: Params) -> str:
        vowels = "aeiouy" if p["y"] else "aeiou"
        if p["per_word"]:
            body = (
                f"print(' '.join(str(sum(ch in {vowels!r} for ch in w.lower())) for w in input().split()))\n"
            )
        else:
            body = f"print(sum(ch in {vowels!r} for ch in input().lower()))\n"
        return body

    return Spec(
        "count_vowels",
        lambda: [{"per_word": w, "y": y} for w in (False, True) for y in (False, True)],
        lambda p: (
            "Read a line of text and print "
            + (
                "the number of vowels in each word, separated by spaces"
                if p["per_word"]
                else "how many vowels it has"
            )
            + (
                ", counting a, e, i, o, u and y as vowels"
                if p["y"]
                else ", counting a, e, i, o and u as vowels"
            )
            + " (upper and lower case alike)."
        ),
        source,
        lambda rng, p: (
            [_line(_words(rng, 2, 4)), "Rhythm Sky\n", _line("AEIOU aeiou YyY")]
            + [_line(_words(rng, 1, 8)) for _ in range(N_TESTS - 3)]
        ),
    )


def _count_letter() -> Spec:
    return Spec(
        "count_letter",
        lambda: [{"letter": c} for c in string.ascii_lowercase],
        lambda p: (
            f"Read a line of text and print how many times the letter '{p['letter']}' occurs in it, "
            "ignoring case."
        ),
        lambda p: f"print(input().lower().count({p['letter']!r}))\n",
        lambda rng, p: (
            [
                _line(_words(rng, 3, 6) + " " + p["letter"] * 2),
                "\n",
                _line(p["letter"].upper() + p["letter"] + " x"),
            ]
            + [_line(_words(rng, 1, 10)) for _ in range(N_TESTS - 3)]
        ),
    )


def _fizzbuzz() -> Spec:
    def space() -> list[Params]:
        return [
            {"a": a, "b": b, "word_a": wa, "word_b": wb}
            for a, b in itertools.combinations(range(2, 10), 2)
            for wa, wb in itertools.permutations(_FIZZ_WORDS, 2)
        ]

    return Spec(
        "fizzbuzz",
        space,
        lambda p: (
            f"Read an integer n. For each i from 1 to n, print on its own line '{p['word_a']}{p['word_b']}' "
            f"if i is divisible by both {p['a']} and {p['b']}, '{p['word_a']}' if it is divisible only by "
            f"{p['a']}, '{p['word_b']}' if it is divisible only by {p['b']}, and i itself otherwise."
        ),
        lambda p: (
            "n = int(input())\nfor i in range(1, n + 1):\n"
            f"    if i % {p['a']} == 0 and i % {p['b']} == 0:\n        print({p['word_a'] + p['word_b']!r})\n"
            f"    elif i % {p['a']} == 0:\n        print({p['word_a']!r})\n"
            f"    elif i % {p['b']} == 0:\n        print({p['word_b']!r})\n"
            "    else:\n        print(i)\n"
        ),
        lambda rng, p: (
            [_line(str(rng.randint(p["b"] + 1, 15))), "1\n", _line(str(p["a"] * p["b"]))]
            + [_line(str(rng.randint(1, 100))) for _ in range(N_TESTS - 3)]
        ),
    )


def _rle() -> Spec:
    def source(p: Params) -> str:
        item = "str(count) + prev" if p["count_first"] else "prev + str(count)"
        return (
            "s = input()\nparts = []\nprev = ''\ncount = 0\nfor ch in s:\n    if ch == prev:\n"
            f"        count += 1\n    else:\n        if count:\n            parts.append({item})\n"
            f"        prev = ch\n        count = 1\nif count:\n    parts.append({item})\n"
            f"print({p['sep']!r}.join(parts))\n"
        )

    def runs(rng: random.Random) -> str:
        return "".join(rng.choice("abcde") * rng.randint(1, 12) for _ in range(rng.randint(1, 8)))

    return Spec(
        "rle",
        lambda: [{"count_first": c, "sep": s} for c in (True, False) for s in ("", " ")],
        lambda p: (
            "Read a string of lowercase letters and print its run-length encoding: each run of equal letters "
            + (
                "is written as the run length followed by the letter"
                if p["count_first"]
                else "is written as the letter followed by the run length"
            )
            + (", with the runs separated by single spaces." if p["sep"] else ", with nothing between runs.")
        ),
        source,
        lambda rng, p: (
            [_line(runs(rng)), "a\n", _line("zzzzzzzzzzzzzzzzzzzzzzzzz")]
            + [_line(runs(rng)) for _ in range(N_TESTS - 3)]
        ),
    )


def _multiples_sum() -> Spec:
    return Spec(
        "multiples_sum",
        lambda: [{"a": a, "b": b} for a, b in itertools.combinations(range(2, 21), 2)],
        lambda p: (
            f"Read an integer n and print the sum of all positive integers below n that are multiples of "
            f"{p['a']} or {p['b']}."
        ),
        lambda p: (
            "n = int(input())\n"
            f"print(sum(i for i in range(1, n) if i % {p['a']} == 0 or i % {p['b']} == 0))\n"
        ),
        lambda rng, p: (
            [_line(str(rng.randint(20, 100))), "1\n", _line(str(p["b"]))]
            + [_line(str(rng.randint(1, 10**5))) for _ in range(N_TESTS - 3)]
        ),
    )


def _caesar() -> Spec:
    return Spec(
        "caesar",
        lambda: [{"shift": k} for k in range(1, 26)],
        lambda p: (
            f"Read a line of lowercase letters and spaces. Shift every letter {p['shift']} places forward in "
            "the alphabet (wrapping from z back to a), keep the spaces, and print the result."
        ),
        lambda p: (
            "out = ''\nfor ch in input():\n    if ch == ' ':\n        out += ch\n    else:\n"
            f"        out += chr((ord(ch) - ord('a') + {p['shift']}) % 26 + ord('a'))\nprint(out)\n"
        ),
        lambda rng, p: (
            [_line(_words(rng, 2, 3)), "xyz abc\n", _line(string.ascii_lowercase)]
            + [_line(_words(rng, 1, 8)) for _ in range(N_TESTS - 3)]
        ),
    )


def _rotate() -> Spec:
    def source(p: Params) -> str:
        k = p["k"] if p["direction"] == "left" else f"-{p['k']}"
        return f"xs = input().split()\nk = {k} % len(xs)\nprint(' '.join(xs[k:] + xs[:k]))\n"

    return Spec(
        "rotate",
        lambda: [{"k": k, "direction": d} for k in range(1, 10) for d in ("left", "right")],
        lambda p: (
            "Read a line of integers separated by spaces and print them rotated "
            f"{p['direction']} by {p['k']} positions (wrapping around), separated by spaces."
        ),
        source,
        lambda rng, p: (
            [_line(_ints(rng, 1, 99, 5, 7)), "7\n", _line(_ints(rng, -9, 9, p["k"], p["k"]))]
            + [_line(_ints(rng, -999, 999, 1, 15)) for _ in range(N_TESTS - 3)]
        ),
    )


def _count_divisible() -> Spec:
    return Spec(
        "count_divisible",
        lambda: [{"k": k} for k in range(2, 21)],
        lambda p: (
            "Read a line of integers separated by spaces and print how many of them are divisible by "
            f"{p['k']}."
        ),
        lambda p: f"print(sum(int(x) % {p['k']} == 0 for x in input().split()))\n",
        lambda rng, p: (
            [_line(_ints(rng, 1, 60, 6, 8)), "0\n", _line(f"{p['k']} {p['k'] + 1} -{p['k']}")]
            + [_line(_ints(rng, -1000, 1000, 1, 20)) for _ in range(N_TESTS - 3)]
        ),
    )


def _power_sum() -> Spec:
    return Spec(
        "power_sum",
        lambda: [{"power": k} for k in _POWERS],
        lambda p: (
            f"Read a line of integers separated by spaces and print the sum of their {_POWERS[p['power']]}."
        ),
        lambda p: f"print(sum(int(x) ** {p['power']} for x in input().split()))\n",
        lambda rng, p: (
            [_line(_ints(rng, 1, 9, 3, 4)), "0\n", _line("-2 2")]
            + [_line(_ints(rng, -99, 99, 1, 10)) for _ in range(N_TESTS - 3)]
        ),
    )


def _max_window() -> Spec:
    return Spec(
        "max_window",
        lambda: [{"k": k} for k in range(2, 7)],
        lambda p: (
            f"Read a line of at least {p['k']} integers separated by spaces and print the largest sum of "
            f"{p['k']} consecutive numbers."
        ),
        lambda p: (
            f"xs = [int(x) for x in input().split()]\n"
            f"print(max(sum(xs[i:i + {p['k']}]) for i in range(len(xs) - {p['k']} + 1)))\n"
        ),
        lambda rng, p: (
            [
                _line(_ints(rng, -9, 20, p["k"] + 2, p["k"] + 4)),
                _line(_ints(rng, -50, -1, p["k"], p["k"])),
                _line(" ".join(["5"] * (p["k"] + 1))),
            ]
            + [_line(_ints(rng, -100, 100, p["k"], 20)) for _ in range(N_TESTS - 3)]
        ),
    )


def _reduce_steps() -> Spec:
    return Spec(
        "reduce_steps",
        lambda: [{"d": d} for d in range(2, 10)],
        lambda p: (
            f"Read a positive integer n. Repeat until n equals 1: if n is divisible by {p['d']}, divide "
            f"it by {p['d']}, otherwise subtract 1. Print the number of steps taken."
        ),
        lambda p: (
            f"n = int(input())\nsteps = 0\nwhile n != 1:\n    if n % {p['d']} == 0:\n        n //= {p['d']}\n"
            "    else:\n        n -= 1\n    steps += 1\nprint(steps)\n"
        ),
        lambda rng, p: (
            [_line(str(rng.randint(10, 100))), "1\n", _line(str(p["d"] ** 3))]
            + [_line(str(rng.randint(1, 10**9))) for _ in range(N_TESTS - 3)]
        ),
    )


def _palindrome() -> Spec:
    def word(rng: random.Random) -> str:
        half = "".join(rng.choice("abc") for _ in range(rng.randint(1, 4)))
        return half + half[::-1] if rng.random() < 0.5 else half + rng.choice("xyz") + half

    return Spec(
        "palindrome",
        lambda: [{"yes": y, "no": n} for y, n in _YES_NO],
        lambda p: (
            f"Read a word and print '{p['yes']}' if it reads the same forwards and backwards, "
            f"otherwise print '{p['no']}'."
        ),
        lambda p: f"w = input()\nprint({p['yes']!r} if w == w[::-1] else {p['no']!r})\n",
        lambda rng, p: [_line(word(rng)), "a\n", "ab\n"] + [_line(word(rng)) for _ in range(N_TESTS - 3)],
    )


SPECS: dict[str, Spec] = {
    s.id: s
    for s in (
        _digit_sum(),
        _reverse_words(),
        _count_vowels(),
        _count_letter(),
        _fizzbuzz(),
        _rle(),
        _multiples_sum(),
        _caesar(),
        _rotate(),
        _count_divisible(),
        _power_sum(),
        _max_window(),
        _reduce_steps(),
        _palindrome(),
    )
}
