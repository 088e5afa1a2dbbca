"""Valid sample trajectories, one or more per grammar variant, as (tag, content) pairs."""

from __future__ import annotations

from hypothesis import strategies as st

from coa.format import TAGS, Trajectory

GOOD_REFLECTION = (
    "Information Conflict: good\nTool Effectiveness: average\nTrajectory Monitoring: Fair\nOn track."
)
POOR_REFLECTION = (
    "Information Conflict: good\nTool Effectiveness: poor\nTrajectory Monitoring: good\nWrong page."
)

WEB = [
    ("think", "I need the year the Eiffel Tower opened."),
    ("plan", "1. Search for the opening year.\n2. Confirm it on a second page."),
    ("think", "Search first."),
    ("web_search", "Eiffel Tower opening year"),
    ("observation", "1. Eiffel Tower - Wikipedia: opened 31 March 1889 ..."),
    ("think", "Confirm on the page."),
    ("crawl_page", "https://en.wikipedia.org/wiki/Eiffel_Tower"),
    ("observation", "The tower was inaugurated on 31 March 1889. <html><b>bold</b></html>"),
    ("think", "Grade progress."),
    ("reflection", GOOD_REFLECTION),
    ("think", "Propose."),
    ("suggested_answer", "1889"),
    ("think", "Check it."),
    ("double_check", "Score: 4\nTwo sources agree."),
    ("think", "Done."),
    ("answer", "1889"),
]

MHQA = [
    ("think", "Two hops: director, then birthplace."),
    ("plan", "1. Who directed Jaws?\n2. Where was he born?"),
    ("think", "Hop one."),
    ("wiki_search", "Jaws 1975 film director"),
    ("observation", "Jaws is a 1975 film directed by Steven Spielberg."),
    ("think", "Hop two."),
    ("wiki_search", "Steven Spielberg birthplace"),
    ("observation", "Spielberg was born in Cincinnati, Ohio."),
    ("think", "Reflect."),
    ("reflection", "Both hops answered; no conflict."),
    ("think", "Answer."),
    ("answer", "Cincinnati|Ohio"),
]

MATH = [
    ("plan", "Compute 2**10 and check with code."),
    ("think", "Print it."),
    ("code", "```py\nprint(2**10)\n```"),
    ("observation", "1024"),
    ("reflection", "The output matches 2^10 = 1024."),
    ("think", "Answer."),
    ("answer", "\\boxed{1024}"),
]

CODE = [
    ("plan", "Read n and print n squared."),
    ("think", "Test with stdin."),
    ("code", "```py\nn = int(input())\nprint(n * n)\n```\n```sh\n7\n```"),
    ("observation", "49"),
    ("reflection", "Correct for 7."),
    ("think", "Final program."),
    ("answer", "```py\nn = int(input())\nprint(n * n)\n```"),
]

AFM = [
    ("think", "Need a computation and a lookup."),
    ("plan", "1. Find the population.\n2. Compute the ratio."),
    ("think", "Search."),
    ("web_search", "population of Iceland 2023"),
    ("observation", "Iceland had 387,758 inhabitants in 2023."),
    ("think", "Compute."),
    ("code", "```python\nprint(387758 / 1000)\n```"),
    ("observation", "387.758"),
    ("think", "Look at the chart."),
    ("visual_inspector", '```json\n{"file_path": "chart.png"}\n```'),
    ("observation", "A bar chart of populations."),
    ("think", "Reflect."),
    ("reflection", GOOD_REFLECTION),
    ("think", "Suggest."),
    ("suggested_answer", "387.758"),
    ("think", "Check."),
    ("double_check", "Score: 3\nRounding may differ."),
    ("think", "Answer."),
    ("answer", "387.758"),
]

VALID: dict[str, list[list[tuple[str, str]]]] = {
    "web": [WEB],
    "mhqa": [MHQA],
    "code_math": [MATH, CODE],
    "afm": [AFM],
}


# Tool output that tries to forge segments: live tags, escaped-looking tags, stray brackets.
_FRAGMENTS = [f"<{t}>" for t in TAGS] + [f"</{t}>" for t in TAGS]
_FRAGMENTS += [
    "<\\answer>",
    "<\\\\/observation>",
    "<\\/think>",
    "<",
    ">",
    "/",
    "\\",
    "\n",
    "\n\n",
    " ",
    "<div>",
]
adversarial = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(_FRAGMENTS)), max_size=12).map("".join)


def traj(pairs: list[tuple[str, str]]) -> Trajectory:
    return Trajectory.of(pairs)
