"""Episodes out of any artifact that holds them, in one shape the viewer's page shows.

An :class:`Episode` is one agent attempt at one task: a teacher's collected run (``trajectory.v1``,
kept or quarantined by curation: ``quarantine.v1`` rows whose payload is a run), a CoA SFT example
(``sft.v1``, its trained and masked spans from the stored ``observation_spans``), an RL rollout
(``rollout.v1``: its environment spans masked, its reward terms) or an evaluation episode
(``eval.v1``: the verdict, the score and what decided it). Its :class:`Piece` list is the episode's
steps in order, each with its role (think, plan, tool_call, observation, reflection, verification,
answer, …), its text, its tokens where the artifact recorded them per step, and whether training
masked it.

:func:`load` reads every episode table of an artifact (or a loose Parquet file); above ``cap``
episodes it keeps ``cap`` of them evenly spaced over the rows (deterministic: the same artifact gives
the same page) and says so in :attr:`View.sampled_from`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

import schemas
from coa import io
from coa.errors import UserError
from coa.format.codec import LIVE_TAG_RE
from coa.format.masks import observation_spans
from coa.format.segments import TOOL_TAGS

DEFAULT_CAP = 20_000
"""The most episodes one page embeds: above it the page shows an evenly spaced sample and says so."""

ROLES = (
    "think", "plan", "tool_call", "observation", "reflection", "verification", "answer", "delegate",
    "error", "text",
)  # fmt: skip
"""The roles the page colours: the CoA role agents, a tool call and its observation, the teacher's
delegation and failed steps, and ``text`` for characters outside any segment (a malformed output)."""

_TAG_ROLE = {
    "think": "think", "plan": "plan", "reflection": "reflection", "suggested_answer": "verification",
    "double_check": "verification", "answer": "answer", "observation": "observation",
    **{tag: "tool_call" for tag in TOOL_TAGS},
}  # fmt: skip
"""CoA tag -> role."""

_RUN_ROLE = {
    "plan": "plan", "think": "think", "tool_call": "tool_call", "reflection": "reflection",
    "verification": "verification", "final_answer": "answer", "delegate": "delegate", "error": "error",
}  # fmt: skip
"""trajectory.v1 step role -> role."""

EPISODE_SCHEMAS = (
    schemas.TRAJECTORY.id, schemas.QUARANTINE.id, schemas.SFT.id, schemas.ROLLOUT.id, schemas.EVAL.id,
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Piece:
    """One step (or the part of one a masked span cuts): its role, the label shown (the tag or the
    tool), its text, its tokens when recorded per step, and where it starts in the episode's text."""

    role: str
    label: str
    text: str
    tokens: int | None = None
    start: int | None = None
    masked: bool = False

    def to_json(self) -> list[Any]:
        return [self.role, self.label, self.text, self.tokens, self.start, int(self.masked)]


@dataclasses.dataclass(frozen=True)
class Episode:
    """One attempt at one task as the page shows it."""

    id: str
    kind: str
    """``run``, ``quarantined``, ``sft``, ``rollout`` or ``eval``."""
    task_id: str
    family: str
    question: str
    verdict: str
    """``pass``, ``fail`` or ``unscored``."""
    status: str
    reward: float | None
    reason: str
    tokens: int | None
    pieces: tuple[Piece, ...]
    facts: tuple[tuple[str, str], ...] = ()
    spans: tuple[tuple[int, int], ...] = ()
    """The masked character spans as the artifact stores them (SFT) or as the rollout's text holds
    them; the page marks exactly these."""
    side: str = ""
    """``student`` or ``teacher`` in an evaluation shown beside the teacher."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "task": self.task_id, "family": self.family,
            "q": self.question, "verdict": self.verdict, "status": self.status, "reward": self.reward,
            "reason": self.reason, "tokens": self.tokens, "steps": [p.to_json() for p in self.pieces],
            "facts": [list(f) for f in self.facts], "spans": [list(s) for s in self.spans],
            "side": self.side,
        }  # fmt: skip


@dataclasses.dataclass(frozen=True)
class View:
    """What one page shows: the artifact, its episodes, how many there were, and the teacher's
    episodes on the same tasks (an evaluation shown side by side)."""

    uri: str
    kinds: tuple[str, ...]
    episodes: tuple[Episode, ...]
    total: int
    teacher: tuple[Episode, ...] = ()
    teacher_uri: str = ""
    teacher_total: int = 0

    @property
    def sampled_from(self) -> int | None:
        """The number of episodes the artifact holds when the page shows a sample of them."""
        return self.total if self.total > len(self.episodes) else None


# -- text with segments -----------------------------------------------------------------------


def segment_bounds(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, tag)`` covering ``text``: each CoA segment from its opening tag to its closing
    tag and the newline after it; characters outside any segment (or in a segment never closed, a
    truncated output) as ``text``. Tolerant: a model's malformed output still splits."""
    out: list[tuple[int, int, str]] = []
    pos, open_at, open_tag = 0, -1, ""
    for m in LIVE_TAG_RE.finditer(text):
        closing, tag = bool(m.group(1)), m.group(2)
        if not closing and open_at < 0:
            if m.start() > pos:
                out.append((pos, m.start(), "text"))
            open_at, open_tag = m.start(), tag
        elif closing and open_at >= 0 and tag == open_tag:
            end = m.end() + text.startswith("\n", m.end())
            out.append((open_at, end, tag))
            pos, open_at = end, -1
    if open_at >= 0:
        out.append((open_at, len(text), open_tag))
    elif pos < len(text):
        out.append((pos, len(text), "text"))
    return out


def text_pieces(text: str, spans: Sequence[tuple[int, int]] = ()) -> tuple[Piece, ...]:
    """The steps of a CoA text, cut at the ``spans`` (masked) so each piece is wholly masked or not."""
    cuts = sorted({c for s in spans for c in s if 0 < c < len(text)})
    pieces = []
    for a, b, tag in segment_bounds(text):
        edges = [a, *(c for c in cuts if a < c < b), b]
        for x, y in zip(edges, edges[1:], strict=False):
            masked = any(s <= x and y <= e for s, e in spans)
            role = _TAG_ROLE.get(tag, "text")
            pieces.append(Piece(role, tag, text[x:y], start=x, masked=masked))
    return tuple(pieces)


# -- one reader per contract ------------------------------------------------------------------


def _verdict(correct: bool | None) -> str:
    return "unscored" if correct is None else ("pass" if correct else "fail")


def _run_pieces(steps: Iterable[Mapping[str, Any]]) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    for s in steps:
        role = _RUN_ROLE.get(s["role"], "text")
        tokens = s.get("completion_tokens")
        label = f"{s['agent']} · {s['role']}"
        if role == "tool_call":
            call = f"{s.get('tool_name') or 'tool'}({s.get('tool_args') or ''})"
            text = f"{s['text']}\n{call}" if s.get("text") else call
            pieces.append(Piece(role, f"{s['agent']} · {s.get('tool_name') or 'tool'}", text, tokens))
            if s.get("observation") is not None:
                pieces.append(Piece("observation", s.get("tool_name") or "observation", s["observation"]))
            continue
        text = s.get("text") or ""
        if s.get("fields") and role in ("reflection", "verification"):
            text = f"{text}\n{s['fields']}" if text else s["fields"]
        if s.get("error"):
            text = f"{text}\n{s['error']}" if text else s["error"]
        pieces.append(Piece(role, label, text, tokens))
    return tuple(pieces)


def run_episode(row: Mapping[str, Any], kind: str = "run", reason: str = "") -> Episode:
    """A ``trajectory.v1`` row (a teacher's collected or curated run)."""
    tokens = (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0)
    facts = [
        ("teacher", row.get("teacher")), ("steps", row.get("n_steps")),
        ("tool calls", row.get("n_tool_calls")),
        ("prompt tokens", row.get("prompt_tokens")), ("completion tokens", row.get("completion_tokens")),
        ("cost $", row.get("cost_usd")), ("latency s", row.get("latency_s")),
        ("final answer", row.get("final_answer")), ("gold", " | ".join(row.get("gold_answers") or [])),
    ]  # fmt: skip
    facts = [(k, f"{v:.3g}" if isinstance(v, float) else v) for k, v in facts]
    return Episode(
        id=str(row["run_id"]), kind=kind, task_id=str(row["task_id"]), family=str(row["family"]),
        question=str(row.get("question") or ""), verdict=_verdict(row.get("correct")),
        status="quarantined" if kind == "quarantined" else str(row["status"]), reward=None,
        reason=reason or (row.get("error") or ""), tokens=tokens, pieces=_run_pieces(row.get("steps") or []),
        facts=tuple((k, str(v)) for k, v in facts if v not in (None, "")),
    )  # fmt: skip


def quarantine_episode(row: Mapping[str, Any]) -> Episode:
    """A ``quarantine.v1`` row: the run it rejected when its payload is one, else the payload as text."""
    reason = f"{row['stage']}: {row['reason']}" + (f": {row['detail']}" if row.get("detail") else "")
    try:
        payload = json.loads(row["payload"])
    except (TypeError, ValueError):
        payload = None
    if isinstance(payload, dict) and {"run_id", "task_id", "family", "steps"} <= payload.keys():
        return run_episode(payload, "quarantined", reason)
    text = str(row.get("payload") or "")
    known = payload if isinstance(payload, dict) else {}
    return Episode(
        id=str(row["row_key"]), kind="quarantined", task_id=str(known.get("task_id", row["row_key"])),
        family=str(known.get("family", "")), question=str(known.get("question", "")),
        verdict="unscored", status="quarantined", reward=None, reason=reason, tokens=None,
        pieces=(Piece("text", "payload", text),), facts=(("source", str(row["source"])),),
    )  # fmt: skip


def sft_episode(row: Mapping[str, Any]) -> Episode:
    """An ``sft.v1`` example: the assistant's CoA text, the stored observation spans masked."""
    messages = row["messages"]
    question = next((m["content"] for m in messages if m["role"] == "user"), "")
    content = next((m["content"] for m in reversed(messages) if m["role"] == "assistant"), "")
    spans = tuple((int(s["start"]), int(s["end"])) for s in row["observation_spans"] or [])
    masked = sum(e - s for s, e in spans)
    facts = [("variant", row["variant"]), ("run", row["run_id"]), ("tokenizer", row["tokenizer"]),
             ("prompt version", row["prompt_version"]),
             ("trained / masked chars", f"{len(content) - masked} / {masked}")]  # fmt: skip
    return Episode(
        id=str(row["example_id"]), kind="sft", task_id=str(row["task_id"]), family=str(row["family"]),
        question=question, verdict="unscored", status=str(row["variant"]), reward=None, reason="",
        tokens=row["n_tokens"], pieces=text_pieces(content, spans), spans=spans,
        facts=tuple((k, str(v)) for k, v in facts),
    )  # fmt: skip


def rollout_episode(row: Mapping[str, Any], questions: Mapping[str, str]) -> Episode:
    """An ``rollout.v1`` episode: its environment spans (observations) masked, its reward terms."""
    text = row["text"] or ""
    spans = tuple(observation_spans(text))
    mask = row.get("loss_mask") or []
    trained = sum(1 for m in mask if m)
    terms = ", ".join(
        f"{t} {row[f'reward_{t}']:+.2f}" for t in ("correct", "format", "efficiency", "overlong")
    )
    facts = [("prompt", row["prompt_id"]), ("group / sample", f"{row['group']} / {row['sample']}"),
             ("optimizer step", row["step"]), ("policy version", row.get("policy_version")),
             ("trained / environment ids", f"{trained} / {len(mask) - trained}"), ("kept", row["kept"]),
             ("tool calls", row["tool_calls"]), ("format valid", row["format_valid"])]  # fmt: skip
    return Episode(
        id=f"{row['prompt_id']}#{row['step']}.{row['sample']}", kind="rollout", task_id=str(row["task_id"]),
        family=str(row.get("variant") or ""), question=questions.get(row["prompt_id"], ""),
        verdict=_verdict(row["correct"]), status=str(row["finish"]), reward=float(row["reward"]),
        reason=f"{row['finish']}; {terms}", tokens=row["tokens"], pieces=text_pieces(text, spans),
        facts=tuple((k, str(v)) for k, v in facts if v is not None), spans=spans,
    )  # fmt: skip


def eval_episode(row: Mapping[str, Any], questions: Mapping[str, str], side: str = "") -> Episode:
    """An ``eval.v1`` row: the model's generated text, its verdict, score and what decided it."""
    reason = row.get("score_detail") or row.get("format_error") or row.get("error") or ""
    status = "error" if row.get("error") else ("valid" if row["format_valid"] else "format_error")
    facts = [
        ("model", row["model"]), ("benchmark", row["benchmark"]), ("sample", row["sample_index"]),
        ("prediction", row.get("prediction")), ("scorer", row.get("scorer")), ("turns", row["n_turns"]),
        ("tool calls", row["n_tool_calls"]), ("total tokens", row["total_tokens"]),
        ("gold in observation", row["gold_in_observation"]), ("latency s", f"{row['latency_s']:.3g}"),
    ]  # fmt: skip
    return Episode(
        id=str(row["eval_id"]), kind="eval", task_id=str(row["task_id"]), family=str(row["family"]),
        question=questions.get(row["task_id"], ""), verdict=_verdict(row["correct"]), status=status,
        reward=float(row["score"]), reason=str(reason), tokens=row["completion_tokens"],
        pieces=text_pieces(row["text"] or ""), facts=tuple((k, str(v)) for k, v in facts if v is not None),
        side=side,
    )  # fmt: skip


# -- reading an artifact ----------------------------------------------------------------------


def _tables(uri: str) -> tuple[str, dict[str, tuple[str, Any]]]:
    """The artifact's URI and its tables: name -> (schema id, a reader of rows by index)."""
    import pyarrow.parquet as pq

    ref = io.lookup(uri)
    if ref is not None:
        return ref.uri, {name: (info.schema_id, (ref, name)) for name, info in ref.tables.items()}
    fs, path = io.filesystem(uri)
    if not fs.exists(path):
        raise UserError(
            f"{uri}: no such artifact or file: give a committed artifact folder or a Parquet file"
        )
    if fs.isdir(path):
        raise io.ArtifactError(f"{uri} is a folder without a {io.MANIFEST} marker: not a committed artifact")
    with fs.open(path, "rb") as fh:
        meta = pq.read_schema(fh).metadata or {}
    sid = meta.get(schemas.SCHEMA_ID_KEY, b"").decode()
    return uri, {path.rsplit("/", 1)[-1]: (sid, uri)}


def _read(source: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """A table's rows from where :func:`_tables` (or :func:`staged_tables`) found it: a committed
    artifact's table, a loose Parquet file, or a file staged for a commit."""
    if isinstance(source, tuple):
        return io.read_table(source[0], source[1], columns=columns)
    if isinstance(source, Staged):
        import pyarrow.parquet as pq

        with source.fs.open(source.path, "rb") as fh:
            return pq.read_table(fh, columns=columns)
    return io.read_parquet_file(source)


@dataclasses.dataclass(frozen=True)
class Staged:
    """A table written for an artifact not committed yet (the runner's hook reads it before the commit)."""

    fs: Any
    path: str


def upstream_of(uri: str) -> list[io.ArtifactRef]:
    """The committed artifacts ``uri`` was made from (its lineage's upstream); none for a loose file."""
    ref = io.lookup(uri)
    if ref is None:
        return []
    try:
        found = [io.lookup(u["uri"]) for u in io.read_lineage(ref).get("upstream", [])]
    except (OSError, ValueError, io.ArtifactError):
        return []
    return [r for r in found if r is not None]


def _questions(tables: Mapping[str, tuple[str, Any]], upstream: Iterable[io.ArtifactRef]) -> dict[str, str]:
    """task id (and prompt id) -> question: from the artifact's ``rl_prompt.v1`` table, else from
    the ``rl_prompt.v1`` (an RL step's prompts) and ``task.v1`` tables of the artifacts it was made
    from (its lineage)."""
    out: dict[str, str] = {}

    def prompts(source: Any) -> None:
        for r in _read(source, ["prompt_id", "task_id", "prompt"]).to_pylist():
            user = next((m["content"] for m in r["prompt"] if m["role"] == "user"), "")
            out.setdefault(r["prompt_id"], user)
            out.setdefault(r["task_id"], user)

    for sid, source in tables.values():
        if sid == schemas.RL_PROMPT.id:
            prompts(source)
    for up_ref in upstream:
        for name, info in up_ref.tables.items():
            if info.schema_id == schemas.RL_PROMPT.id:  # an RL step's prompts (a conversion's table)
                prompts((up_ref, name))
            elif info.schema_id == schemas.TASK.id:
                for r in io.read_table(up_ref, name, columns=["task_id", "question"]).to_pylist():
                    out.setdefault(r["task_id"], r["question"])
    return out


def _pick(n: int, cap: int) -> list[int]:
    """``min(n, cap)`` row indices evenly spaced over ``n`` rows (all of them when ``n <= cap``)."""
    return list(range(n)) if n <= cap else [i * n // cap for i in range(cap)]


def _episodes(uri: str, cap: int, side: str = "") -> tuple[tuple[str, ...], list[Episode], int]:
    """(kinds, episodes, total) of every episode table of ``uri``, ``cap`` at most over them all."""
    uri, tables = _tables(uri)
    return _from_tables(uri, tables, lambda: upstream_of(uri), cap, side)


def _from_tables(
    uri: str,
    tables: Mapping[str, tuple[str, Any]],
    upstream: Callable[[], Iterable[io.ArtifactRef]],
    cap: int,
    side: str = "",
) -> tuple[tuple[str, ...], list[Episode], int]:
    held = {name: (sid, src) for name, (sid, src) in tables.items() if sid in EPISODE_SCHEMAS}
    if not held:
        found = ", ".join(f"{n} ({sid or 'no schema id'})" for n, (sid, _) in tables.items())
        raise UserError(
            f"{uri} holds no episodes (tables: {found}): give collected runs, a curated or converted "
            f"artifact, RL rollouts or an evaluation (tables of {', '.join(EPISODE_SCHEMAS)})"
        )
    questions = (
        _questions(tables, upstream())
        if any(s in (schemas.ROLLOUT.id, schemas.EVAL.id) for s, _ in held.values())
        else {}
    )
    read = {name: _read(src) for name, (_, src) in held.items()}
    total = sum(t.num_rows for t in read.values())
    episodes: list[Episode] = []
    kinds: list[str] = []
    for name, (sid, _) in held.items():
        table = read[name]
        share = table.num_rows if total <= cap else max(1, cap * table.num_rows // total)
        rows = table.take(_pick(table.num_rows, share)).to_pylist() if table.num_rows else []
        if sid == schemas.TRAJECTORY.id:
            episodes += [run_episode(r) for r in rows]
        elif sid == schemas.QUARANTINE.id:
            episodes += [quarantine_episode(r) for r in rows]
        elif sid == schemas.SFT.id:
            episodes += [sft_episode(r) for r in rows]
        elif sid == schemas.ROLLOUT.id:
            episodes += [rollout_episode(r, questions) for r in rows]
        else:
            episodes += [eval_episode(r, questions, side) for r in rows]
        kinds.append(f"{name} ({sid}, {table.num_rows} rows)")
    return tuple(kinds), episodes, total


def from_tables(
    uri: str,
    tables: Mapping[str, tuple[str, Any]],
    upstream: Callable[[], Iterable[io.ArtifactRef]],
    cap: int = DEFAULT_CAP,
) -> View:
    """The episodes of ``tables`` (name -> (schema id, where to read it: :class:`Staged` for a table
    not committed yet)) of the artifact at ``uri``, made from ``upstream`` (read for the questions an
    evaluation's or a rollout's rows do not hold), at most ``cap``."""
    kinds, episodes, total = _from_tables(uri, tables, upstream, cap)
    return View(uri=uri, kinds=kinds, episodes=tuple(episodes), total=total)


def load(uri: str, teacher: str | None = None, cap: int = DEFAULT_CAP) -> View:
    """The episodes of ``uri`` (at most ``cap``, evenly spaced over the rows above it); with
    ``teacher`` (collected runs or an evaluation of the teacher on the same tasks), the teacher's
    episodes on the tasks shown, for the side-by-side view."""
    if cap < 1:
        raise UserError(f"cap {cap}: give a positive number of episodes")
    kinds, episodes, total = _episodes(uri, cap, "student" if teacher else "")
    if teacher is None:
        return View(uri=uri, kinds=kinds, episodes=tuple(episodes), total=total)
    shown = {e.task_id for e in episodes}
    _, theirs, teacher_total = _episodes(teacher, 10 * cap, "teacher")
    paired = tuple(dataclasses.replace(e, side="teacher") for e in theirs if e.task_id in shown)
    asked = {e.task_id: e.question for e in paired if e.question}  # an evaluation's rows hold no question
    episodes = [
        e if e.question else dataclasses.replace(e, question=asked.get(e.task_id, "")) for e in episodes
    ]
    if not paired:
        raise UserError(
            f"--teacher {teacher} has no episode on the tasks of {uri}: give the teacher's runs on the "
            "same tasks (the pipeline's collect.heldout artifact)"
        )
    return View(uri=uri, kinds=kinds, episodes=tuple(episodes), total=total, teacher=paired,
                teacher_uri=teacher, teacher_total=teacher_total)  # fmt: skip
