"""``coa view`` on real stage outputs, each page loaded in headless Chromium and read back from its DOM.

The episodes: the offline teacher's collected runs on synthetic tasks; RL rollouts from the real
rollout engine (a scripted policy on the tiny tokenizer, tests/rl/test_curate_rollouts.py), curated
by ``coa curate`` (one kept, three quarantined as duplicates) and converted by ``coa convert`` (an
SFT example with its stored observation span); an evaluation of a scripted student on the teacher's
tasks, shown beside the teacher's runs. Checked from the DOM: the roles, the masked spans equal to
the stored ones, filters and search changing the visible count, the teacher/student pairing, no
script error. One screenshot per kind (into ``COA_VIEWER_SCREENSHOTS`` when set: docs/images).
"""

from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.evaluate.config import EvalConfig
from coa.evaluate.present import VERDICTS
from coa.evaluate.stage import evaluate_tasks
from coa.facts import Link, Markdown
from coa.plan.stages import STAGES, facts
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.steps import StepResult
from coa.view import commit, episodes, page
from coa.view.links import sample_links
from coa.view.serve import PageServer
from tests.rl.conftest import codec, tiny_model  # noqa: F401 (fixtures)
from tests.rl.test_curate_rollouts import last_uri, rollout_rows, task_rows
from tests.rollout.helpers import SpyToolBox, blocks

pytestmark = [
    pytest.mark.slow,  # end to end: four stages' outputs, then about 15 page loads in headless Chromium
    pytest.mark.skipif(
        shutil.which("chromium") is None,
        reason="the page checks need headless Chromium: apt-get install chromium (make test does, as root)",
    ),
]
REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")
"""A markdown link: (label, URL)."""


class Dom(html.parser.HTMLParser):
    """The viewer's DOM as the test reads it: cards (``div.ep``) with their steps, the count, errors."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.cards: list[dict[str, Any]] = []
        self.attrs: dict[str, dict[str, str]] = {}
        self._pair, self._side, self._in_pre, self._in_errors = "", "", False, False
        self.errors = ""  # what the page's error handler wrote (window 'error' events)
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        cls = a.get("class", "").split()
        if "id" in a:
            self.attrs[a["id"]] = a
            self._in_errors = a["id"] == "errors"
        if "pair" in cls:
            self._pair = a["data-task"]
        elif cls in (["student"], ["teacher"]):
            self._side = cls[0]
        elif "ep" in cls:
            self.cards.append({**a, "pair": self._pair, "column": self._side, "steps": []})
        elif "step" in cls and tag == "div" and "data-role" in a:
            self.cards[-1]["steps"].append({**a, "masked": "masked" in cls, "text": ""})
        elif tag == "pre" and "t" in cls:
            self._in_pre = True

    def handle_endtag(self, tag: str) -> None:
        self._in_pre = self._in_pre and tag != "pre"
        self._in_errors = False

    def handle_data(self, data: str) -> None:
        if self._in_errors:
            self.errors += data
        if self._in_pre:
            self.cards[-1]["steps"][-1]["text"] += data


def load(path: Path, fragment: str = "", screenshot: Path | None = None) -> tuple[Dom, str]:
    """The page's DOM after its script ran (and Chromium's console output)."""
    chromium = shutil.which("chromium")
    assert chromium is not None
    profile = tempfile.mkdtemp(prefix="coa-chromium-")
    flags = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
             "--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0"]  # fmt: skip
    url = f"{path.as_uri()}#{fragment}"
    try:
        if screenshot is not None:
            subprocess.run([*flags, "--window-size=1400,1000", f"--screenshot={screenshot}", url],
                           capture_output=True, timeout=120, check=True)  # fmt: skip
        done = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    dom = Dom(done.stdout)
    assert 'data-ready="1"' in done.stdout, done.stderr[-2000:]  # the script ran to its end
    return dom, done.stderr


def count(dom: Dom) -> int:
    return int(dom.attrs["count"]["data-n"])


def no_errors(path: Path, dom: Dom, console: str) -> None:
    text = path.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained: nothing to fetch
    assert "Uncaught" not in console, console[-2000:]
    assert "errors" in dom.attrs and dom.errors == "", dom.errors  # the page's error handler saw none


def shoot(tmp: Path, kind: str) -> Path:
    folder = Path(os.environ.get("COA_VIEWER_SCREENSHOTS") or tmp)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"viewer-{kind}.png"


@pytest.fixture(scope="module")
def artifacts(
    codec: Codec,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    teacher_runs: list[dict[str, Any]],
    synthetic_tasks: dict[str, Any],
) -> dict[str, str]:
    """URIs of: collected runs, an RL artifact's rollouts, their curation and conversion, an evaluation."""
    mp = pytest.MonkeyPatch()
    mp.setenv("COA_STORAGE_ROOT", str(tmp_path_factory.mktemp("viewer") / "store"))
    mp.chdir(REPO)
    try:
        store = io.Store()
        out: dict[str, str] = {}
        w = store.writer("trajectories", "teacher", {"test": "viewer"})
        w.write_table("trajectories", schemas.TRAJECTORY.from_rows(teacher_runs), schemas.TRAJECTORY)
        out["runs"] = w.commit().uri
        w = store.writer("model", "rl", {"test": "viewer"})
        w.write_table("rollouts", schemas.ROLLOUT.from_rows(rollout_rows(codec)), schemas.ROLLOUT)
        out["rollouts"] = w.commit().uri
        w = store.writer("tasks", "test", {"test": "viewer"})
        w.write_table("tasks", schemas.TASK.from_rows(task_rows()), schemas.TASK)
        tasks = w.commit().uri
        cli = CliRunner()
        curated = cli.invoke(app, ["curate", "--raw", out["rollouts"], "--tasks", tasks])
        assert curated.exit_code == 0, curated.output
        out["curated"] = last_uri(curated.stdout, "curated")
        converted = cli.invoke(
            app, ["convert", "--curated", out["curated"], "--tasks", tasks, "convert.tokenizer=approx"]
        )
        assert converted.exit_code == 0, converted.output
        out["sft"] = last_uri(converted.stdout, "converted")
        # a scripted student on four of the teacher's tasks: right on two, wrong on two
        heldout = synthetic_tasks["train"].slice(0, 4)
        replies = {}
        for i, t in enumerate(heldout.to_pylist()):
            value = t["gold_answers"][0] if i % 2 == 0 else "no idea"
            replies[t["question"]] = [blocks(("think", "I answer directly."), ("answer", value))]
        table = evaluate_tasks(
            heldout,
            ScriptedPolicy(codec, replies),
            SpyToolBox(),
            EvalConfig(max_turns=2, prompt_style="brief"),
        )
        w = store.writer("eval", "student", {"test": "viewer"})
        w.write_table("eval", table, schemas.EVAL)
        out["eval"] = w.commit().uri
        return out
    finally:
        mp.undo()


def test_collected_runs_show_every_role_and_filter_by_verdict_and_search(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "runs.html"
    result = CliRunner().invoke(app, ["view", artifacts["runs"], "--out", str(path)])
    assert result.exit_code == 0, result.output
    view = episodes.load(artifacts["runs"])
    dom, console = load(path, screenshot=shoot(tmp_path, "runs"))
    no_errors(path, dom, console)
    assert count(dom) == len(view.episodes) == 20
    assert len(dom.cards) == 20
    roles = {s["data-role"] for c in dom.cards for s in c["steps"]}
    assert {"think", "plan", "tool_call", "observation", "verification", "answer"} <= roles
    first = dom.cards[0]
    assert first["data-id"] == view.episodes[0].id
    assert [s["data-role"] for s in first["steps"]] == [p.role for p in view.episodes[0].pieces]
    assert {e.verdict for e in view.episodes} == {"unscored"}  # collection scores nothing (curation does)
    family = view.episodes[-1].family
    by_family, _ = load(path, f"family={family}")
    assert count(by_family) == sum(e.family == family for e in view.episodes) < 20
    assert {c["data-id"] for c in by_family.cards} == {e.id for e in view.episodes if e.family == family}
    needle = view.episodes[3].question.split()[-1].lower()
    searched, _ = load(path, f"q={needle}")
    want = [e.id for e in view.episodes if needle in json.dumps(e.to_json(), ensure_ascii=False).lower()]
    assert count(searched) == len(want) and {c["data-id"] for c in searched.cards} == set(
        want[: page.PAGE_SIZE]
    )
    short, _ = load(path, "lmax=3000")
    assert count(short) == sum(e.tokens is not None and e.tokens <= 3000 for e in view.episodes)


def test_sft_page_marks_exactly_the_stored_observation_spans(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    path = page.write(episodes.load(artifacts["sft"]), tmp_path / "sft.html")
    converted = io.lookup(artifacts["sft"])  # `coa convert` committed its page with its tables
    assert converted is not None and commit.PAGE_FILE in converted.files
    recorded = io.read_lineage(converted)[commit.LINEAGE_KEY]
    assert recorded["shown"] == recorded["total"] == len(episodes.load(artifacts["sft"]).episodes)
    rows = {r["example_id"]: r for r in io.read_table(artifacts["sft"], "sft").to_pylist()}
    dom, console = load(path)
    one, _ = load(path, f"q={next(iter(rows))}", screenshot=shoot(tmp_path, "sft"))
    assert count(one) == 1 and one.cards[0]["data-kind"] == "sft"
    no_errors(path, dom, console)
    sft_cards = [c for c in dom.cards if c["data-kind"] == "sft"]
    assert len(sft_cards) == len(rows) == 1
    for card in sft_cards:
        row = rows[card["data-id"]]
        content = row["messages"][-1]["content"]
        stored = [[s["start"], s["end"]] for s in row["observation_spans"]]
        assert stored and json.loads(card["data-spans"]) == stored
        masked = [[int(s["data-start"]), int(s["data-end"])] for s in card["steps"] if s["masked"]]
        assert masked == stored  # the page marks the stored spans, no more, no less
        for s in card["steps"]:
            assert s["text"] == content[int(s["data-start"]) : int(s["data-end"])]
        assert "".join(s["text"] for s in card["steps"]) == content
        assert {s["data-role"] for s in card["steps"]} >= {
            "plan",
            "think",
            "tool_call",
            "observation",
            "answer",
        }


def test_rollouts_and_curation_show_rewards_masks_and_quarantine_reasons(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    rollouts = page.write(episodes.load(artifacts["rollouts"]), tmp_path / "rollouts.html")
    dom, console = load(rollouts, screenshot=shoot(tmp_path, "rollouts"))
    no_errors(rollouts, dom, console)
    rows = io.read_table(artifacts["rollouts"], "rollouts").to_pylist()
    assert count(dom) == len(rows) == 12
    for card, row in zip(dom.cards, rows, strict=True):
        masked = [[int(s["data-start"]), int(s["data-end"])] for s in card["steps"] if s["masked"]]
        assert masked == json.loads(card["data-spans"]) and all(
            s["data-role"] == "observation" for s in card["steps"] if s["masked"]
        )
        assert "".join(s["text"] for s in card["steps"]) == row["text"]
    rewarded = sum(r["reward"] >= 1.0 for r in rows)
    high, _ = load(rollouts, "rmin=1")
    assert count(high) == rewarded and 0 < rewarded < 12
    # the page `coa curate` committed with its artifact, opened on the links its Prefect artifacts give
    ref = io.lookup(artifacts["curated"])
    assert ref is not None and commit.PAGE_FILE in ref.files  # in the manifest: committed with the tables
    recorded = io.read_lineage(ref)[commit.LINEAGE_KEY]
    assert {k: recorded[k] for k in ("file", "shown", "total", "teacher")} == {
        "file": commit.PAGE_FILE, "shown": 4, "total": 4, "teacher": None,
    }  # fmt: skip
    curated = Path(io.filesystem(ref.uri)[1]) / commit.PAGE_FILE
    assert recorded["bytes"] == curated.stat().st_size and recorded["seconds"] > 0
    shown = facts(
        STAGES["curate"], StepResult("curate", ref, True, io.read_lineage(ref)["result"]["summary"])
    )
    links = dict(
        LINK.findall(
            next(f.text for f in shown.items if isinstance(f, Markdown) and f.what == "episodes-sample")
        )
    )
    assert next(f.url for f in shown.items if isinstance(f, Link)) == curated.as_uri()
    reason = links["quarantined as exact_duplicate (3)"]
    assert reason == f"{curated.as_uri()}#kind=quarantined&reason=exact_duplicate"
    dom, console = load(curated, reason.split("#")[1], screenshot=shoot(tmp_path, "curated"))
    no_errors(curated, dom, console)
    reasons = io.read_table(artifacts["curated"], "quarantine").column("reason").to_pylist()
    assert count(dom) == len(reasons) == 3 and {c["data-kind"] for c in dom.cards} == {"quarantined"}
    kept, _ = load(curated, links["kept runs (1)"].split("#")[1])
    assert count(kept) == 1 and {c["data-kind"] for c in kept.cards} == {"run"}
    text = curated.read_text()
    assert all(f"curate: {r}" in text for r in reasons)  # the reason shown with its stage and detail


def test_evaluation_beside_the_teacher_pairs_episodes_by_task(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "eval.html"
    result = CliRunner().invoke(
        app, ["view", artifacts["eval"], "--teacher", artifacts["runs"], "-o", str(path)]
    )
    assert result.exit_code == 0, result.output
    dom, console = load(path, screenshot=shoot(tmp_path, "eval"))
    no_errors(path, dom, console)
    students = [c for c in dom.cards if c["column"] == "student"]
    teachers = [c for c in dom.cards if c["column"] == "teacher"]
    assert len(students) == 4 and len(teachers) >= 4
    for card in dom.cards:
        assert card["data-task"] == card["pair"]  # each card sits in the pair of its own task
        assert card.get("data-side") == card["column"]
    assert {c["data-task"] for c in students} == {c["data-task"] for c in teachers}
    assert all(
        s["q"] for s in [e.to_json() for e in episodes.load(artifacts["eval"], artifacts["runs"]).episodes]
    )
    # an evaluation report's committed page: the evaluation beside the teacher, opened on its link
    store = io.Store(str(Path(io.filesystem(artifacts["eval"])[1]).parents[1]))
    w = store.writer("eval-report", "viewer", {"test": "viewer"})
    w.extra_lineage["inputs"] = {
        "candidate": {"uri": artifacts["eval"], "table": "eval"},
        "teacher": {"uri": artifacts["runs"], "table": "trajectories"},
    }
    w.write_file("report.html", "<html><body>report</body></html>")
    assert commit.commit_page(w) == 4
    report = w.commit()
    sample = sample_links(report, "Failed and passed episodes", VERDICTS)
    assert sample is not None and "each beside the teacher's runs on its task" in sample.text
    links = dict(LINK.findall(sample.text))
    committed = Path(io.filesystem(report.uri)[1]) / commit.PAGE_FILE
    assert links == {
        "failed": f"{committed.as_uri()}#verdict=fail",
        "passed": f"{committed.as_uri()}#verdict=pass",
    }
    failed, _ = load(committed, "verdict=fail")
    assert count(failed) == 2 and {c["data-side"] for c in failed.cards} == {"student", "teacher"}
    assert all(c["data-task"] == c["pair"] for c in failed.cards)


def test_large_artifacts_are_sampled_and_say_so_and_the_page_is_served(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    view = episodes.load(artifacts["runs"], cap=7)
    assert len(view.episodes) == 7 and view.sampled_from == 20
    assert [e.id for e in view.episodes] == [e.id for e in episodes.load(artifacts["runs"], cap=7).episodes]
    path = page.write(view, tmp_path / "sampled.html", page_size=3)
    assert "holds 20 episodes; this page shows 7" in path.read_text()
    pages = [load(path, f"page={n}")[0] for n in (1, 3)]  # 3 + 3 + 1
    assert [[c["data-id"] for c in p.cards] for p in pages] == [
        [e.id for e in view.episodes[:3]],
        [view.episodes[6].id],
    ]
    assert pages[1].attrs["pageno"] is not None and count(pages[1]) == 7
    with PageServer(path) as server:
        with urllib.request.urlopen(server.url, timeout=10) as answer:
            assert answer.read() == path.read_bytes()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(server.url + "other", timeout=10)


def test_an_artifact_without_episodes_is_refused_with_what_to_give(
    artifacts: dict[str, str], tmp_path: Path
) -> None:
    upstream = [io.lookup(u["uri"]) for u in io.read_lineage(artifacts["sft"])["upstream"]]
    tasks = next(ref for ref in upstream if ref is not None and ref.kind == "tasks")
    result = CliRunner().invoke(app, ["view", tasks.uri, "-o", str(tmp_path / "x.html")])
    assert result.exit_code == 2 and "holds no episodes" in result.output
    assert not (tmp_path / "x.html").exists()
