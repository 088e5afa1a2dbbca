"""The evaluation-time leak guard: blocked benchmark hosts, and the gold answer seen in an observation.

Blocking happens in the tools (:func:`coa.tools.search.blocked_url` drops search hits and refuses
crawls of the configured ``host/path-prefix`` locations, see :class:`LeakGuardConfig`). Flagging
happens here, after a run: :func:`gold_in_observations` says whether a search or crawl observation
of the run contains the task's gold answer (normalised text, on word boundaries). Code-tool
observations are not read: a program that prints the answer computed it, it did not look it up.

For retrieval QA (multi-hop, web) a document holding the answer is what the agent is meant to find,
so the flag is a measurement ("the answer was in front of the model") to read beside the blocked
hosts, not a verdict; the metrics count it as ``leak_rate``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from coa.format import FormatError, parse
from coa.scoring import normalize_answer

LOOKUP_TOOLS = ("web_search", "wiki_search", "crawl_page")


def observations_of(text: str) -> list[tuple[str, str]]:
    """``(tool, observation)`` pairs of a run's text, in order (search and crawl tools only)."""
    try:
        segments = parse(text, strict=False).segments
    except FormatError:
        return []
    out = []
    for before, segment in zip(segments, segments[1:], strict=False):
        if segment.tag == "observation" and before.tag in LOOKUP_TOOLS:
            out.append((before.tag, segment.content))
    return out


def gold_in_observations(text: str, gold_answers: Sequence[str]) -> bool:
    """Whether a search or crawl observation in ``text`` contains one of the gold answers."""
    golds = [g for g in (normalize_answer(a) for a in gold_answers) if g]
    if not golds:
        return False
    patterns = [re.compile(rf"(?<!\w){re.escape(g)}(?!\w)") for g in golds]
    for _, observation in observations_of(text):
        seen = normalize_answer(observation)
        if any(p.search(seen) for p in patterns):
            return True
    return False
