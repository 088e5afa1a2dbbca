"""The GPU check rehearsed on the CPU twin of the device (``infra/twin.py``), as the device runs it.

What travels (tracked files, untracked ones git does not ignore, the carried paths) is measured as the
device measures it; the check's default parts run end to end from a copy holding only that, with the
image's packages and nothing else (no project installed, no ``PYTHONPATH``), no network, and ``$OUT``
read back under the device's rules. A variable lost in a subshell, a module not carried, a path that
exists only here or a file ``$OUT`` would not return fails here first.

The rules' own tests are quick; the end-to-end one costs ~2 minutes of ``gpu-prepare.sh``, ~2-3 of
building ``.venv-twin`` on a fresh machine, and the check's run on CPU shapes (~2.5 minutes).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "infra"))
import twin  # noqa: E402


def git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / ".gitignore").write_text("ignored/\n")
    (path / "tracked.txt").write_text("x" * 1000)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    (path / "untracked.txt").write_text("y" * 100)  # not ignored: it travels
    (path / "ignored").mkdir()
    (path / "ignored" / "big.bin").write_bytes(b"z" * 5000)  # ignored: it stays unless carried
    return path


def test_what_travels_is_tracked_untracked_not_ignored_and_carried(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    travel = twin.travelling(repo, [])
    assert set(travel.files) == {".gitignore", "tracked.txt", "untracked.txt"}
    assert travel.total == 1000 + 100 + len("ignored/\n") and travel.too_big() is None

    travel = twin.travelling(repo, [twin.carried("ignored")])
    assert "ignored/big.bin" in travel.files and travel.bytes_by_part["ignored (carried)"] == 5000
    own = tmp_path / "own-build"  # the twin carries its own build of a path (wheels for its Python)
    own.mkdir()
    (own / "a.whl").write_bytes(b"w" * 10)
    travel = twin.travelling(repo, [twin.carried(f"{own}:.whl")])
    assert travel.files[".whl/a.whl"] == own / "a.whl"

    (repo / "huge.bin").write_bytes(b"\0" * (twin.TRAVEL_LIMIT + 1))  # untracked, not ignored
    why = twin.travelling(repo, []).too_big()
    assert (
        why is not None and "over the device's 64 MiB" in why and "huge.bin" not in why
    )  # by top-level part
    assert "(top-level files) 64.0 MiB" in why and ".gitignore" in why


def test_out_comes_back_under_the_devices_rules(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "a" / "b" / "c").mkdir(parents=True)
    for i in range(7):
        (out / f"f{i}.json").write_text("{}")
    (out / "a" / "b" / "deep.txt").write_text("two folders down: returned")
    (out / "a" / "b" / "c" / "deeper.txt").write_text("three: not")
    (out / "bad name.txt").write_text("a space")
    (out / "ninth.log").write_text("over 8 files")
    kept, left = twin.returned(out)
    assert len(kept) == 8 and "a/b/deep.txt" in kept
    assert any("deeper.txt (more than 2 folders down)" in item for item in left)
    assert any(item.startswith("bad name.txt (a name with characters") for item in left)
    assert any("(over 8 files)" in item for item in left)


def test_the_twin_holds_the_images_packages_and_says_where_it_cannot() -> None:
    reqs, notes = twin.twin_requirements()
    names = {r.split("==")[0] for r in reqs}
    assert {"torch", "transformers", "accelerate", "pyarrow", "safetensors", "tokenizers"} <= names
    assert "transformers==5.17.0" in reqs and "pyarrow==25.0.1" in reqs  # the image's, not the project's pins
    assert not names & {"trl", "datasets", "pydantic", "polars", "great-expectations", "prefect"}  # not there
    assert any(n.startswith("torch 2.13.0 instead of 2.11.0") for n in notes)


def prepare(dest: Path, **env: str) -> None:
    """``infra/gpu-prepare.sh`` as a user runs it before a GPU session (into a scratch folder)."""
    full = {**os.environ, "GPU_PREPARE_DEST": str(dest), "PY": sys.executable, **env}
    proc = subprocess.run(
        ["bash", "infra/gpu-prepare.sh"], cwd=ROOT, env=full, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_the_gpu_check_fits_the_device_call_and_runs_on_the_twin(tmp_path: Path) -> None:
    """One ``gpu-prepare.sh`` (the real one: Python 3.12 wheels, the demo's store), what it carries
    measured against the device's 64 MiB, then ``bash infra/gpu-check.sh`` (env, sft, rl, demo) from a
    copy of what travels, on CPU shapes (one test: the two share the ~2-minute prepare)."""
    prepared = tmp_path / "prepared"
    prepare(prepared)
    travel = twin.travelling(ROOT, [(prepared / ".whl", ".whl"), (prepared / ".gpu", ".gpu")])
    print({part: round(size / twin.MiB, 2) for part, size in travel.bytes_by_part.items()})
    assert travel.too_big() is None, travel.too_big()
    assert (prepared / ".gpu" / "bin" / "bwrap").stat().st_size < 1 << 20  # the sandbox travels (~70 KB)
    assert not list((prepared / ".gpu").rglob("episodes.html"))  # no viewer page (~9 MB each) is carried
    assert (prepared / ".gpu" / "encyclopedia.parquet").is_file()  # what the RL bench's search serves
    wheels = {p.name.split("-")[0].lower() for p in (prepared / ".whl").glob("*.whl")}
    assert {"coa_pipeline", "trl", "datasets", "pydantic", "math_verify", "bm25s"} <= wheels
    assert not wheels & {"polars", "polars_runtime_32", "great_expectations"}  # no curation on the GPU side

    own = tmp_path / "own"  # the same pins as the device's wheels, for this machine's Python
    prepare(own, GPU_PREPARE_PARTS="wheels", GPU_PYTHON=f"{sys.version_info.major}.{sys.version_info.minor}")
    carry = [(own / ".whl", ".whl"), (prepared / ".gpu", ".gpu")]
    run = twin.run("bash infra/gpu-check.sh", carry, work=tmp_path / "twin")
    tail = run.output_tail[-4000:]
    assert run.status == 0, tail
    assert not run.left_out, run.left_out
    expected = {
        "env.txt",
        "parts.tsv",
        "sft.json",
        "sft.log",
        "rl.json",
        "rl.log",
        "demo-gpu.json",
        "demo-gpu.log",
    }
    assert set(run.returned) == expected, tail
    with (run.out / "parts.tsv").open() as f:
        parts = {row["part"]: row for row in csv.DictReader(f, delimiter="\t")}
    assert {name: row["status"] for name, row in parts.items()} == {"sft": "0", "rl": "0", "demo": "0"}
    print({name: row["wall_s"] for name, row in parts.items()}, f"twin {run.wall_s} s")

    env_txt = (run.out / "env.txt").read_text()
    assert "coa-pipeline " in env_txt and "bwrap: runs" in env_txt and "error" not in env_txt
    assert "reach demo:" in env_txt and "python 3.11" in env_txt  # the twin's Python, said
    sft = json.loads((run.out / "sft.json").read_text())
    assert sft["complete"] is True
    tiny = sft["figures"]["tiny"]
    assert tiny["ours"]["steps"] == tiny["bare_trl"]["steps"] == 3 and tiny["ours"]["path"] == "plain"
    assert tiny["ours"]["tokens_per_s"] > 0 and tiny["bare_trl"]["tokens_per_s"] > 0
    rl = json.loads((run.out / "rl.json").read_text())
    assert rl["figures"]["rollouts"]["tokens_per_s"]["ours (hf_batched)"] > 0
    assert set(rl["figures"]["rl_step"]["split"]) == {"generation_s", "tools_s", "training_s", "total_s"}
    demo = json.loads((run.out / "demo-gpu.json").read_text())
    status = {row["stage"]: row["status"] for row in demo["stages"]}
    assert status["convert"] == "reused" and status["collect.heldout"] == "reused"  # built on the CPU
    assert status["sft"] == "built" and status["rl"] == "built" and status["evaluate.after_rl"] == "built"
    assert demo["comparison"], "the demo's table (every family before/after SFT and after RL)"
