"""Keys from the code a step depends on: a step's code version hashes the files its stage's build
can reach (its import closure in coa and schemas, with their packages' data files) and the stage's
explicit version, never the whole tree; of a Python file its code only (no comments, no docstrings),
and never the runner's storage, trackers or readings (``coa.version.UNKEYED``). Edits are made on a
copy of the source tree."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coa import io, version
from coa.plan import load_pipeline_config, plan
from coa.train import step as sft

from .plan_keys import planned_keys

REPO = Path(__file__).resolve().parents[2]
WATCHED = ("sft", "evaluate.after", "evaluate.before")


def _clear() -> None:
    for cached in (
        version._imports,
        version.closure,
        version._file_hash,
        version.closure_version,
        version.step_files,
    ):
        cached.cache_clear()


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the source tree the code versions are computed from (the running code stays)."""
    for package in ("coa", "schemas", "docs"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(version, "_source_root", lambda: tmp_path)
    _clear()
    yield tmp_path
    _clear()


def _keys(tmp_path: Path) -> dict[str, str]:
    _clear()
    config = load_pipeline_config(REPO / "configs" / "demo.yaml")
    return planned_keys(plan(config), io.Store(str(tmp_path / "store")))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def test_the_closure_of_sft_holds_the_trainer_format_and_contract_not_the_cli() -> None:
    files = version.closure_files(sft.STAGE.build.__module__)
    assert {"coa/train/step.py", "coa/train/sft.py", "coa/train/sft_trainer.py", "schemas/sft.py"} <= set(
        files
    )
    assert any(f.startswith("coa/format/") for f in files)
    assert not [f for f in files if f.startswith(("coa/cli", "coa/_cli/", "coa/plan/", "coa/collect/"))], (
        files
    )
    assert sft.STAGE.code_version().startswith("sft.v1+src.")


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        (
            "coa/_cli/stages.py",
            'help="Keep the first N usable rows',
            'help="Keep the first N usable rows (typo fixed)',
        ),
        ("docs/concepts/steps.md", "# ", "# Edited: "),
        ("coa/rl/step.py", '"""Train ``base``', '"""Train (edited) ``base``'),
        ("coa/plan/pipeline.py", '"""The steps of a pipeline run', '"""The steps (edited) of a pipeline run'),
        ("coa/train/present.py", 'f"# SFT loss', 'f"# SFT training loss'),
        ("coa/evaluate/present.py", '"""Metrics per family', '"""Metrics (edited) per family'),
        ("coa/train/sft.py", '"""', '"""Edited. '),
        ("schemas/sft.py", "import pyarrow as pa", "import pyarrow as pa  # edited"),
    ],
    ids=[
        "cli-help",
        "docs",
        "unrelated-stage",
        "plan-docstring",
        "sft-presentation",
        "eval-presentation",
        "trainer-docstring",
        "contract-comment",
    ],  # fmt: skip
)
def test_an_unrelated_edit_keeps_the_sft_and_evaluation_keys(
    tree: Path, path: str, old: str, new: str
) -> None:
    before = _keys(tree)
    _edit(tree / path, old, new)
    after = _keys(tree)
    assert {s: after[s] for s in WATCHED} == {s: before[s] for s in WATCHED}


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        ("coa/train/sft.py", 'LOSS_PNG = "loss_curve.png"', 'LOSS_PNG = "loss.png"'),
        ("coa/format/__init__.py", '"""', '"""Edited. """\nEDITED = 1\n"""'),
        (
            "schemas/sft.py",
            'VARIANTS = ("web", "mhqa", "code_math", "afm")',
            'VARIANTS = ("web", "mhqa", "afm")',
        ),
    ],
    ids=["trainer", "coa-format", "sft-contract"],
)
def test_an_edit_to_what_sft_runs_changes_the_sft_and_evaluation_keys(
    tree: Path, path: str, old: str, new: str
) -> None:
    before = _keys(tree)
    _edit(tree / path, old, new)
    after = _keys(tree)
    assert after["sft"] != before["sft"] and after["evaluate.after"] != before["evaluate.after"]
    assert after["synthetic"] == before["synthetic"]  # a stage that reaches none of it keeps its key


def runner_edits(tree: Path) -> None:
    """Documentation edits all over the runner and storage, and code edits to the unkeyed modules."""
    for rel in ("coa/steps.py", "coa/inputs.py", "coa/io/writer.py", "coa/io/read.py", "coa/execution.py"):
        path = tree / rel
        text = path.read_text()
        first = text.index('"""') + 3
        path.write_text(
            f"# a comment added\n{text[:first]}Edited docstring. {text[first:]}\n# and one at the end\n"
        )
    for rel in ("coa/io/writer.py", "coa/tracking/__init__.py", "coa/resources.py"):  # storage, trackers
        (tree / rel).write_text((tree / rel).read_text() + "\n_EDITED_CODE = 1\n")


def test_documentation_and_storage_edits_in_the_runner_keep_every_key(tree: Path) -> None:
    """A docstring or comment edit anywhere in the runner, or any edit to storage and the trackers,
    leaves every key of the demo plan as it was: nothing rebuilds."""
    before = _keys(tree)
    runner_edits(tree)
    assert _keys(tree) == before


def test_a_computational_edit_to_the_trainer_rekeys_sft_and_what_follows_only(tree: Path) -> None:
    before = _keys(tree)
    _edit(tree / "coa/train/sft.py", 'LOSS_PNG = "loss_curve.png"', 'LOSS_PNG = "loss.png"')
    after = _keys(tree)
    names = list(before)
    first = names.index("sft")
    changed = [n for n in names if after[n] != before[n]]
    assert "sft" in changed and not [n for n in changed if names.index(n) < first], changed
    unchanged = {"synthetic", "collect", "curate", "convert", "student", "evaluate.before", "collect.heldout"}
    assert unchanged <= set(names) and not unchanged & set(changed), changed
    assert {"evaluate.after", "rl", "evaluate.after_rl", "report"} <= set(changed), changed


def test_the_code_of_a_file_is_its_text_without_comments_and_docstrings() -> None:
    source = (
        '"""Module doc."""\nimport os  # why\nX = 1\n"""X\'s doc."""\n\n\n'
        'def f(a):\n    """Doc\n    more."""\n'
        '    # a comment\n    s = "kept"\n    return f"{a}"  # trailing\n'
    )
    assert version.code_text(source.encode()).decode() == (
        'import os\nX = 1\ndef f(a):\n    s = "kept"\n    return f"{a}"'
    )


def test_what_a_stage_presents_lies_outside_its_key() -> None:
    """What a stage shows lives in its ``present`` module, listed by the stage table beside the stage
    (:data:`coa.plan.stages.PRESENTERS`): no stage's build reaches a presentation module, so editing
    what a stage shows rebuilds nothing."""
    from coa.plan.stages import PRESENTERS, STAGES

    assert {"collect", "curate", "sft", "rl", "evaluate", "eval-report", "report"} <= set(PRESENTERS)
    assert set(PRESENTERS) <= set(STAGES)
    modules = {p.__module__.replace(".", "/") + ".py" for p in PRESENTERS.values()}
    assert all(m.endswith("/present.py") for m in modules), modules
    for stage in STAGES.values():
        assert not modules & set(stage.code_files()), (stage.name, modules & set(stage.code_files()))


def test_the_gate_depends_on_the_registry_and_the_comparison_not_the_evaluation() -> None:
    """The gate's key hashes the registry, the comparison of two evaluations and the runner, not
    the evaluation's engine, the LLM client or the tools (114 files before its packages' imports
    were narrowed, 41 after)."""
    from coa.registry import step as gate

    files = version.closure_files(gate.STAGE.build.__module__)
    assert {"coa/registry/gate.py", "coa/registry/store.py", "coa/evaluate/compare.py"} <= set(files)
    engines = ("coa/llm/", "coa/rollout/", "coa/tools/", "coa/format/")
    reached = sorted(f for f in files if f.startswith(engines))
    assert not reached, reached
    assert len(files) <= 45, len(files)


def test_every_stage_names_contracts_that_have_a_module() -> None:
    from coa.plan.stages import STAGES

    for stage in STAGES.values():
        assert all(version.contract_module(c) for c in stage.contracts()), stage.name
        assert stage.code_version().startswith(f"{stage.name}.v{stage.version}+src.")


def test_the_keys_of_the_demo_plan_are_fast_to_compute(tmp_path: Path) -> None:
    _clear()
    config = load_pipeline_config(REPO / "configs" / "demo.yaml")
    steps = plan(config)
    started = time.perf_counter()
    planned_keys(steps, io.Store(str(tmp_path)))
    cold = time.perf_counter() - started
    started = time.perf_counter()
    planned_keys(steps, io.Store(str(tmp_path)))
    warm = time.perf_counter() - started
    print(f"keys of the demo plan ({len(steps)} steps): {cold:.2f} s cold, {warm * 1000:.1f} ms cached")
    assert cold < 20 and warm < 1


def test_dry_run_says_which_steps_a_code_change_rebuilds_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.plan.preview import preview
    from coa.steps import Stage, run_step
    from coa.synthetic import SyntheticConfig
    from coa.synthetic import step as synthetic

    store = io.Store(str(tmp_path))
    step = synthetic.step(SyntheticConfig(train={"arithmetic": 2}, heldout={"arithmetic": 1}))
    run_step(step, store)
    assert [p.status for p in preview([step], store)] == ["reuse"]  # the same code: reused
    files = dict(synthetic.STAGE.code_files())
    edited = {**files, "coa/synthetic/arithmetic.py": "0" * 12}
    monkeypatch.setattr(Stage, "code_files", lambda self: edited)
    monkeypatch.setattr(Stage, "code_version", lambda self: "synthetic.v1+src.edited")
    (planned,) = preview([step], store)
    assert planned.status == "build (code changed: coa/synthetic/arithmetic.py)", planned.status


def test_code_versions_computed_from_many_threads_at_once_agree() -> None:
    """A flow's steps compute their code versions in Prefect task threads: concurrent ``ast.parse``
    must not fail (CPython 3.11's AST recursion-depth check is not thread-safe) and all agree."""
    import concurrent.futures

    from coa import version

    modules = ["coa.train.step", "coa.rl.step", "coa.evaluate.step", "coa.collect.step"] * 4
    version._imports.cache_clear()
    version.closure.cache_clear()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda m: version.closure(m), modules))
    assert all(found[i] == found[i % 4] for i in range(len(modules)))
    assert all(len(files) > 5 for files in found)


def test_code_versions_survive_another_thread_building_python_asts() -> None:
    """CPython 3.11 keeps one AST recursion counter for all threads: a Prefect or user thread that
    calls ``ast.parse`` while a flow computes its keys used to fail the flow ("AST constructor
    recursion depth mismatch", CI 2026-12-01). Keys are read from bytecode: no Python AST built."""
    import ast
    import threading

    from coa import version

    source = Path(version.__file__).read_text() * 4
    stop = threading.Event()
    errors: list[BaseException] = []

    def parse_forever() -> None:
        while not stop.is_set():
            try:
                ast.parse(source)
            except BaseException as e:  # noqa: BLE001 - recorded, the test reports it
                errors.append(e)
                return

    class Cycle:  # garbage whose finalizer gives the GIL away, as a collection inside a parse may
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            time.sleep(0)

    other = threading.Thread(target=parse_forever, daemon=True)
    other.start()
    try:
        version._imports.cache_clear()  # the ~130 files of RL's closure compiled beside the parse
        version._statements.cache_clear()
        version.closure.cache_clear()
        for _ in range(2000):
            Cycle()
        assert len(version.closure("coa.rl.step")) > 5
    finally:
        stop.set()
        other.join(10)
    assert not errors, errors
