"""``infra/engine_check.py``: the one-command engine check, run here against coa.serve (``--dry-run``
speaks vLLM's or SGLang's protocol; ``--engine coa`` its own disk transport), the same steps and
record as against a real engine; and the exact command lines it would start vLLM and SGLang with."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.rl.conftest import tiny_model  # noqa: F401 (fixture)
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

ROOT = Path(__file__).resolve().parents[2]


def load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_check", ROOT / "infra" / "engine_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(model: Path, out: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code = load_check().main(["--model", str(model), "--out", str(out), "--ready-timeout", "120", *args])
    return code, json.loads(out.read_text())


@pytest.mark.parametrize(
    ("args", "steps"),
    [
        (("--engine", "vllm", "--dry-run"), 9),  # the vLLM adapter: reload_weights, LoRA by name
        (("--engine", "sglang", "--dry-run"), 9),  # SGLang's adapter: full weights, LoRA by name
        (
            (
                "--engine",
                "coa",
            ),
            9,
        ),  # coa.serve's update_info disk transport
    ],
    ids=["vllm-dry-run", "sglang-dry-run", "coa"],
)
def test_each_adapter_passes_against_the_stand_in(
    args: tuple[str, ...],
    steps: int,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    code, record = run(tiny_model, tmp_path / "check.json", *args)
    assert code == 0, json.dumps(record, indent=1)[-3000:]
    done = record["steps"]
    assert isinstance(done, list) and len(done) == steps and all(s["ok"] for s in done)
    by_name = {s["name"]: s for s in done}
    v1 = by_name["generate under v1"]
    assert v1["stamp"] == 1 and v1["logprob_gap_expected"] < 1e-3 < v1["logprob_gap_other"]
    v2 = by_name["generate under v2"]
    assert v2["stamp"] == 2 and v2["logprob_gap_expected"] < 1e-3 < v2["logprob_gap_other"]
    if args[1] == "sglang":  # its model syntax; it serves the v1 folder by its path, adapters unloaded
        assert v1["engine_reported"] >= 1 and v2["model"] == "student:student-v2"
        assert [Path(p).name for p in by_name["unload adapters"]["served"]] == ["v000001"]
    else:
        assert v1["engine_version"] == "1" and v2["model"] == "student-v2"
        assert by_name["unload adapters"]["served"] == ["student"]
    # a second run on the same engine, and a resume after it restarted, each under its version
    second = by_name["second run: check, push v0, generate under v0"]
    assert second["stamp"] == 0 and second["logprob_gap_expected"] < 1e-3 < second["logprob_gap_other"]
    if args[1] == "sglang":  # SGLang serves the last pushed folder's path (the second run's check took
        assert second["served"][0].endswith("second-v000000")  # the first's, v000001)
    restarted = by_name["restart: check, push v1, generate under v1"]
    assert restarted["stamp"] == 1 and restarted["logprob_gap_expected"] < 1e-3
    assert record["engine_exit_before_restart"] == 0
    assert record["engine_exit"] == 0 and record["ok"] is True  # stopped cleanly (SIGTERM)


def test_a_push_that_loads_nothing_fails_the_check(
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coa.engines.vllm import VLLMEngine

    monkeypatch.setattr(VLLMEngine, "push_weights", lambda self, folder, version: self.ledger.set(version))
    code, record = run(tiny_model, tmp_path / "check.json", "--engine", "vllm", "--dry-run")
    assert code == 1 and record["ok"] is False
    failed = [s for s in record["steps"] if not s["ok"]]
    assert [s["name"] for s in failed] == ["generate under v1"]  # the stamp says 1, the weights are v0's
    assert failed[0]["stamp"] == 1 and failed[0]["engine_version"] != "1"


def test_the_real_engines_command_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = load_check()
    monkeypatch.setenv("VLLM_BIN", "/opt/vllm/bin/vllm")
    command, env = check.engine_command("vllm", False, "/m", 8000, 16)
    assert command[:3] == ["/opt/vllm/bin/vllm", "serve", "/m"]
    joined = " ".join(command)
    assert "--worker-extension-cls" not in command  # full weights: vLLM 0.31's own reload_weights
    for flag in (
        "--logprobs-mode processed_logprobs",
        "--enable-lora --max-lora-rank 16",
        "--host 127.0.0.1 --port 8000",
        "--served-model-name student",
    ):
        assert flag in joined
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    monkeypatch.setenv("SGLANG_PYTHON", "/opt/sglang/bin/python")
    command, env = check.engine_command("sglang", False, "/m", 30000, 16)
    assert command[:3] == ["/opt/sglang/bin/python", "-m", "sglang.launch_server"] and env == {}
    assert "--model-path /m" in " ".join(command)
    assert "--enable-lora --max-lora-rank 16 --lora-target-modules q_proj v_proj" in " ".join(command)
