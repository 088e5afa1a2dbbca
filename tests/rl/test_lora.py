"""RL with a LoRA policy (``rl.lora``): the adapter trained by GRPO, pushed to ``coa.serve`` in vLLM mode
by name (one adapter per version, sync and async), generated with on the ``hf`` backend, and saved
as the adapter plus a merged model that loads without peft."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from transformers import AutoModelForCausalLM

from coa.kit.run import CHECKPOINTS_DIR
from coa.rl.config import RLRunConfig
from coa.rl.grpo import run_rl
from coa.rollout import Sampling
from coa.rollout.policies.endpoint import EndpointPolicy
from tests.serve.conftest import ServeProcess
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

from .helpers import prompts_table
from .test_server_backend import FIXED, close, logprobs_of, server_config

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def with_adapter(base: Path, adapter: Path) -> Any:
    from peft import PeftModel

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(adapter)).eval()


def served_logprobs(serve: ServeProcess, model: str, ids: list[int]) -> list[float]:
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    response = httpx.post(f"{serve.url}/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    entries = response.json()["choices"][0]["prompt_logprobs"]
    return [entries[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]


def spy_bodies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """Every request's ``(model, stamped version)`` as EndpointPolicy sends it."""
    sent: list[tuple[str, int | None]] = []
    real = EndpointPolicy.body

    def body(
        self: EndpointPolicy, ids: Sequence[int], max_new: int, sampling: Sampling, version: int | None = None
    ) -> dict[str, Any]:
        out = real(self, ids, max_new, sampling, version)
        sent.append((out["model"], version))
        return out

    monkeypatch.setattr(EndpointPolicy, "body", body)
    return sent


@pytest.mark.sandbox
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lora_adapter_is_pushed_by_name_per_version(
    mode: str, serve: ServeProcess, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import TrainerCallback

    sent = spy_bodies(monkeypatch)
    served: dict[int, list[float]] = {}

    class Probe(TrainerCallback):  # type: ignore[misc]
        """Sync: after step s trains, the adapter of version s (pushed before it) as the server has it."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            version = state.global_step - 1
            served[version] = served_logprobs(serve, f"student-v{version}", FIXED)

    extra: dict[str, Any] = {"mode": "async", "max_staleness": 1, "max_steps": 4} if mode == "async" else {}
    config = server_config(tiny_model, serve, lora=LORA, **extra)
    assert config.adapter_sync
    callbacks = [Probe()] if mode == "sync" else []
    result = run_rl(prompts_table(6), config, tmp_path / "run", callbacks=callbacks)
    steps = 4 if mode == "async" else 3
    assert (result.global_step, result.mode) == (steps, mode)
    assert result.rollout_stats["weight_syncs"] == steps
    # every request named the adapter of the version it was stamped with: student-v<N>
    assert sent and all(model == f"student-v{version}" for model, version in sent)
    rows = pq.read_table(result.rollouts_file).to_pylist()
    assert not any(r["old_kv"] for r in rows)  # an adapter serves its request to its end
    if mode == "sync":
        assert all(r["policy_version"] == r["step"] for r in rows)
    else:
        assert all(r["step"] - r["policy_version"] <= 1 for r in rows if r["kept"])
        assert any(r["step"] - r["policy_version"] == 1 for r in rows if r["kept"])

    # the last checkpoint is an adapter; the served logprobs under its name were the trainer's
    last = tmp_path / "run" / CHECKPOINTS_DIR / f"checkpoint-{steps - 1}"
    assert (last / "adapter_config.json").is_file() and not (last / "model.safetensors").exists()
    trained = logprobs_of(with_adapter(tiny_model, last), FIXED)
    base = logprobs_of(AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval(), FIXED)
    assert max(abs(a - b) for a, b in zip(trained, base, strict=True)) > 1e-3  # the adapter moved
    assert close(served_logprobs(serve, "student", FIXED), base)  # the base model is untouched
    if mode == "sync":  # the adapter served as version N was the trainer's weights at step N
        assert sorted(served) == [0, 1, 2]
        assert close(served[2], trained) and not close(served[2], base)
        step1 = logprobs_of(with_adapter(tiny_model, last.with_name("checkpoint-1")), FIXED)
        assert close(served[1], step1) and not close(served[1], served[2])
    # the run unloaded its adapters at its end (a request naming one is a 404, as vLLM answers)
    models = [m["id"] for m in httpx.get(f"{serve.url}/models").json()["data"]]
    assert models == ["student"]
    assert not list((tmp_path / "run" / "weight_sync").glob("v*"))

    # the artifact: the adapter alone, and the merged model (plain transformers, no peft) the same policy
    assert result.adapter_dir is not None and (Path(result.adapter_dir) / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(result.model_dir).eval()
    assert not any("lora" in k for k in merged.state_dict())
    final = logprobs_of(with_adapter(tiny_model, Path(result.adapter_dir)), FIXED)
    assert close(logprobs_of(merged, FIXED), final, 1e-4)


@pytest.mark.sandbox
def test_hf_backend_trains_a_lora_policy(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hf backend generates with the peft model (base + the adapter being trained)."""
    from peft import PeftModel

    from coa.rollout.policies.hf import HFPolicy

    models: list[Any] = []
    real = HFPolicy.from_model

    def from_model(model: Any, tokenizer: Any, **kw: Any) -> HFPolicy:
        models.append(model)
        return real(model, tokenizer, **kw)

    monkeypatch.setattr(HFPolicy, "from_model", from_model)
    nowhere: Any = SimpleNamespace(url="http://127.0.0.1:9/v1")  # no server: the hf backend
    values = server_config(tiny_model, nowhere, lora=LORA, max_steps=2)
    config = RLRunConfig.model_validate(values.model_dump() | {"rollout": {"backend": "hf"}})
    result = run_rl(prompts_table(6), config, tmp_path / "run")
    assert result.global_step == 2 and result.rollout_backend == "hf"
    assert models and all(isinstance(m, PeftModel) for m in models)
    assert result.adapter_dir is not None and Path(result.model_dir, "model.safetensors").is_file()


def test_lora_config_refuses_what_is_not_built() -> None:
    base = {"base_model": "m", "lora": LORA}
    with pytest.raises(ValueError, match="hf_batched"):
        RLRunConfig.model_validate(base | {"rollout": {"backend": "hf_batched"}})
    with pytest.raises(ValueError, match="weight_sync: adapter"):
        RLRunConfig.model_validate(base | {"rollout": {"backend": "server", "weight_sync": "full"}})
    with pytest.raises(ValueError, match="set rl.lora"):
        RLRunConfig.model_validate({"base_model": "m", "rollout": {"weight_sync": "adapter"}})
    assert RLRunConfig.model_validate(base).lora.dropout == 0.0  # type: ignore[union-attr]


@pytest.mark.sandbox
def test_a_killed_lora_run_resumes_and_replaces_a_leftover_adapter(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path
) -> None:
    """Killed after checkpoint 1, the run resumes from the adapter checkpoint; an adapter of the name
    it pushes next (``student-v1``, as a killed run may leave behind) is replaced, not reused."""
    from transformers import TrainerCallback

    from .test_grpo import _Kill

    out, config = tmp_path / "run", server_config(tiny_model, serve, lora=LORA, max_steps=3)
    with pytest.raises(KeyboardInterrupt):
        run_rl(prompts_table(6), config, out, callbacks=[_Kill(1)])
    checkpoint = out / CHECKPOINTS_DIR / "checkpoint-1"
    stranger = with_adapter(tiny_model, checkpoint)  # another adapter loaded under the name v1 will take
    for module in stranger.modules():
        if hasattr(module, "lora_B"):
            for weight in module.lora_B.values():
                weight.weight.data.normal_(0, 1)
    stranger.save_pretrained(str(tmp_path / "stranger"))
    body = {"lora_name": "student-v1", "lora_path": str(tmp_path / "stranger")}
    assert httpx.post(f"{serve.url}/load_lora_adapter", json=body, timeout=60).status_code == 200
    left = served_logprobs(serve, "student-v1", FIXED)

    served: dict[int, list[float]] = {}

    class Probe(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            served[state.global_step - 1] = served_logprobs(serve, f"student-v{state.global_step - 1}", FIXED)

    result = run_rl(prompts_table(6), config, out, resume=True, callbacks=[Probe()])
    assert (result.start_step, result.global_step) == (1, 3)
    resumed = logprobs_of(with_adapter(tiny_model, checkpoint), FIXED)
    assert close(served[1], resumed) and not close(served[1], left)  # the checkpoint's adapter, replaced
    assert [m["id"] for m in httpx.get(f"{serve.url}/models").json()["data"]] == ["student"]
