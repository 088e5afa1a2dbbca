"""Which tool observations an evaluation saw: live calls, or a recording replayed.

A web evaluation's score depends on what search and crawl returned that day. Run against a recording
(``evaluate.tool_record: replay`` with ``evaluate.recording``: the observation store of an earlier
run, :class:`coa.tools.toolbox.ObservationStore`), every tool call is answered from the recording and
a call that was never recorded fails the run (:class:`~coa.tools.toolbox.ReplayMiss`), so a rerun of
the same model on the same tasks sees the same observations and gives the same rows.

:class:`LedgerToolBox` wraps the evaluation's toolbox and notes each call; :meth:`LedgerToolBox.summary`
is what the artifact records (lineage ``tools``, ``metrics.json`` ``tools``, the report):

* ``mode``: ``replayed`` (every call answered by the recording; also a replay run that made no
  call), ``live`` (every call ran the real tool), ``mixed`` (``auto``: some of each);
* ``record`` (the store mode), ``recording`` (where the observations live; null when none);
* ``calls`` / ``replayed_calls`` / ``live_calls``;
* ``observations_digest``: sha256 over the sorted distinct (tool, provider, argument, observation)
  the run saw: two runs with the same digest saw exactly the same tool results.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from coa.tools.toolbox import ToolResult


class LedgerToolBox:
    """A toolbox that notes every call of the one it wraps (same interface)."""

    def __init__(self, inner: Any, record: str, recording: str | None) -> None:
        self.inner = inner
        self.record = record
        self.recording = recording
        self.calls: list[tuple[str, str, str, bool, str]] = []

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(self.inner.tools)

    async def call(self, name: str, argument: str) -> ToolResult:
        result: ToolResult = await self.inner.call(name, argument)
        provider = str(getattr(self.inner, "providers", {}).get(name, name))
        digest = hashlib.sha256(str(result.observation).encode()).hexdigest()
        self.calls.append((name, provider, argument, bool(result.replayed), digest))
        return result

    def summary(self) -> dict[str, Any]:
        replayed = sum(1 for c in self.calls if c[3])
        live = len(self.calls) - replayed
        if self.record == "replay" or (self.calls and live == 0):
            mode = "replayed"
        elif replayed == 0:
            mode = "live"
        else:
            mode = "mixed"
        seen = sorted({(tool, provider, argument, obs) for tool, provider, argument, _, obs in self.calls})
        return {
            "mode": mode,
            "record": self.record,
            "recording": self.recording,
            "calls": len(self.calls),
            "replayed_calls": replayed,
            "live_calls": live,
            "observations_digest": hashlib.sha256(json.dumps(seen).encode()).hexdigest(),
        }
