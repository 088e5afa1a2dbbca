"""One command that proves an RL engine adapter (coa/engines) against the engine it is written for.

It starts the engine on 127.0.0.1 with exactly the flags the adapter needs, then through the adapter:
probe -> check -> generate (v0) -> push full weights as v1 -> generate under v1 -> push a LoRA
adapter as v2 -> generate under v2 with the adapter's name (vLLM: ``student-v2``; SGLang:
``student:student-v2``) -> unload; then what a second
run meets (a new client checks the same engine, which SGLang now serves under the pushed folder's
path, pushes v0 and generates under it) and what a resume after a restart meets (the engine stopped
and started again, holding no adapter and version ``default``: a new client checks it, unloads an
adapter the engine does not hold without error, pushes v1 and generates under it); writes a JSON
record of each step and stops the engine. "Under V" is checked three ways: the client's stamp is V,
the engine's own version is V (``/weight_info`` for vLLM; SGLang's per-completion
``metadata.weight_version(s)`` agree with the stamp), and the logprobs the engine returned for the
ids it sampled (temperature 1) are those of the pushed weights, computed here with transformers,
not those of the weights before.

    python infra/engine_check.py --engine vllm   --model <HF model folder> [--out engine-check.json]
    python infra/engine_check.py --engine sglang --model <HF model folder>
    python infra/engine_check.py --engine vllm   --dry-run --model <folder>  # coa.serve as vLLM
    python infra/engine_check.py --engine sglang --dry-run --model <folder>  # coa.serve --protocol sglang
    python infra/engine_check.py --engine coa    --model <folder>            # coa.serve, its disk transport

The engines run from their own environments: ``$VLLM_BIN`` (default ``/opt/vllm/bin/vllm``, the GPU
image's) and ``$SGLANG_PYTHON`` (default ``/opt/sglang/bin/python``). This script runs in the
project's environment (torch, transformers, peft: it builds the pushed weights and the reference
logprobs) and imports no vLLM or SGLang. Extra engine flags go after ``--`` (e.g. ``--
--gpu-memory-utilization 0.5``). Exit 0: every step passed; 1: a check failed; 3: the engine did not
start. ``tests/infra/test_engine_check.py`` runs the dry runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file from anywhere: coa from this checkout
    sys.path.insert(0, str(ROOT))

from coa.engines import EngineClient, detect, open_engine  # noqa: E402

NAME = "student"
PROMPT = "Solve the task with tools. What is 17 + 25? Think step by step and answer."


def engine_command(
    engine: str, dry_run: bool, model: str, port: int, lora_rank: int, lora_targets: str = "q_proj,v_proj"
) -> tuple[list[str], dict[str, str]]:
    """The engine's command line and environment: the adapters' flags (docs/how-to/rl-async.md)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if dry_run or engine == "coa":
        command = [sys.executable, "-m", "coa.serve", "--model", model, "--served-model-name", NAME]
        command += ["--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
        if engine == "sglang":
            return [*command, "--protocol", "sglang"], {"PYTHONPATH": path}
        return command, {"PYTHONPATH": path, "VLLM_SERVER_DEV_MODE": "1"}
    if engine == "vllm":
        command = [
            os.environ.get("VLLM_BIN", "/opt/vllm/bin/vllm"),
            "serve",
            model,
            "--served-model-name",
            NAME,
        ]
        command += ["--host", "127.0.0.1", "--port", str(port), "--seed", "0"]
        command += ["--logprobs-mode", "processed_logprobs"]  # full weights: vLLM's own reload_weights
        command += ["--enable-lora", "--max-lora-rank", str(lora_rank), "--max-loras", "4"]
        env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "PYTHONPATH": path}
        return command, env
    python = os.environ.get("SGLANG_PYTHON", "/opt/sglang/bin/python")
    command = [python, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", NAME]
    # LoRA at run time (coa/engines/sglang.py): no adapter at start, so the rank and modules are given
    command += ["--enable-lora", "--max-lora-rank", str(lora_rank), "--lora-target-modules"]
    command += lora_targets.split(",")
    return [*command, "--host", "127.0.0.1", "--port", str(port)], {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Engine:
    """The engine's process: started in its own process group, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        self.log = log.open("w")
        self.process = subprocess.Popen(
            command, env=os.environ | env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, root: str, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the engine exited {self.process.returncode} before it was ready")
            for route in ("/v1/models", "/model_info"):
                try:
                    if httpx.get(f"{root}{route}", timeout=5).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(1)
        raise TimeoutError(f"the engine did not answer in {timeout_s:.0f} s")

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


# ---------------------------------------------------------------------------------------- weights


def load_model(path: str) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()


def perturbed(model: Any, seed: int = 0) -> Any:
    """A copy of ``model`` whose matrices carry noise of half their own spread: other weights, same shapes."""
    import copy

    import torch

    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            if p.dim() == 2:
                p.add_(torch.randn(p.shape, generator=generator) * 0.5 * p.float().std())
    return other


def with_lora(model: Any, rank: int, targets: list[str]) -> Any:
    """``model`` with a LoRA adapter, both factors random (peft's default B = 0 would change nothing)."""
    import copy

    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, init_lora_weights=False)
    return get_peft_model(copy.deepcopy(model), config).eval()


def reference_logprobs(model: Any, prompt: list[int], ids: list[int]) -> list[float]:
    """The logprobs (temperature 1) of ``ids`` after ``prompt`` under ``model``."""
    import torch

    full = torch.tensor([prompt + ids])
    with torch.inference_mode():
        logits = model(full).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids).view(-1, 1)).view(-1).tolist()


def mean_gap(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / max(1, len(a))


# ---------------------------------------------------------------------------------------- the check


class Check:
    """The steps run so far, each with its wall time, outcome and details (the JSON record)."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        record["steps"] = []

    def step(self, name: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        start = time.perf_counter()
        entry: dict[str, Any] = {"name": name}
        try:
            detail = run()
            entry |= {"ok": bool(detail.pop("ok", True)), **detail}
        except Exception as e:  # noqa: BLE001 - recorded: the record is the check's output
            entry |= {"ok": False, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"}
            detail = None
        entry["seconds"] = round(time.perf_counter() - start, 3)
        self.record["steps"].append(entry)
        print(f"engine-check: {name}: {'ok' if entry['ok'] else 'FAILED'} {json.dumps(entry)}", flush=True)
        return detail if entry["ok"] else None


def generate(client: EngineClient, root: str, codec: Any, prompt: list[int], max_new: int) -> Any:
    """One generation through the RL client (EndpointPolicy: stamped, seeded, the version's model name)."""
    from coa.llm.config import EndpointConfig
    from coa.rollout import Sampling
    from coa.rollout.policies.endpoint import EndpointPolicy

    endpoint = EndpointConfig(name="engine-check", base_url=f"{root}/v1", model=NAME, timeout_s=300)
    policy = EndpointPolicy(endpoint, codec, engine=client, seed=0)

    async def once() -> Any:
        await policy.start()
        try:
            return await policy.generate(prompt, max_new, Sampling(temperature=1.0))
        finally:
            await policy.stop()

    return asyncio.run(once())


def under(
    client: EngineClient,
    root: str,
    codec: Any,
    prompt: list[int],
    version: int,
    weights: tuple[Any, Any],
    tol: float,
    engine_version: str | None = None,
) -> dict[str, Any]:
    """Generate and check the generation was sampled by ``weights[0]`` (version ``version``), not by
    ``weights[1]`` (the weights before; None: none), and that the engine's own version is
    ``engine_version`` (vLLM's ``/weight_info``; an adapter push leaves the base's)."""
    expected, other = weights
    model_name = client.request_model(version)
    mismatches = client.ledger.mismatches
    generation = generate(client, root, codec, prompt, 16)
    if not generation.ids:
        return {"ok": False, "error": "the engine generated no ids"}
    gap = mean_gap(generation.logprobs, reference_logprobs(expected, prompt, generation.ids))
    detail: dict[str, Any] = {"stamp": generation.version, "model": model_name, "ids": len(generation.ids)}
    detail["logprob_gap_expected"] = round(gap, 6)
    # before any push SGLang reports its start version ("default"), which no stamp can equal
    agree = version == 0 or client.ledger.mismatches == mismatches
    ok = generation.version == version and gap <= tol and agree
    if other is not None:
        gap_other = mean_gap(generation.logprobs, reference_logprobs(other, prompt, generation.ids))
        detail["logprob_gap_other"] = round(gap_other, 6)
        ok = ok and gap_other > gap
    if engine_version is not None and hasattr(client, "weight_version"):
        detail["engine_version"] = client.weight_version()
        ok = ok and detail["engine_version"] == engine_version
    detail["engine_reported"] = client.ledger.reported
    detail["version_mismatches"] = client.ledger.mismatches
    return detail | {"ok": ok}


def run_checks(
    client: EngineClient,
    root: str,
    args: argparse.Namespace,
    check: Check,
    work: Path,
    expected_kind: str,
    restart: Callable[[], None],
) -> None:
    from coa.rollout import Codec

    codec = Codec.from_pretrained(args.model)
    prompt = codec.encode(PROMPT)
    base = load_model(args.model)

    def probe() -> dict[str, Any]:
        found = detect(root)
        client.check()
        return {
            "detected": found,
            "ok": found == expected_kind,
            "logprobs_processed": client.logprobs_processed,
        }

    if check.step("probe", probe) is None:
        return
    if (
        check.step("generate v0", lambda: under(client, root, codec, prompt, 0, (base, None), args.tol))
        is None
    ):
        return
    pushed = perturbed(base)

    def push_full() -> dict[str, Any]:
        folder = work / "v000001"
        pushed.save_pretrained(str(folder), safe_serialization=True)
        codec.tokenizer.save_pretrained(str(folder))
        client.push_weights(folder, 1)
        return {"folder": str(folder), "old_kv_recorded": client.keeps_old_kv()}

    if check.step("push full weights v1", push_full) is None:
        return
    v1 = check.step(
        "generate under v1", lambda: under(client, root, codec, prompt, 1, (pushed, base), args.tol, "1")
    )
    if v1 is None:
        return
    adapted = with_lora(pushed, args.lora_rank, args.lora_targets.split(","))

    def push_adapter() -> dict[str, Any]:
        folder = work / "a000002"
        adapted.save_pretrained(str(folder))
        client.push_adapter(folder, 2)
        return {"folder": str(folder), "name": client.request_model(2)}

    if check.step("push LoRA adapter v2", push_adapter) is None:
        return
    check.step(
        "generate under v2", lambda: under(client, root, codec, prompt, 2, (adapted, pushed), args.tol, "1")
    )

    def retire() -> dict[str, Any]:
        client.retire_adapters()
        return {"served": client.served_models()}

    if check.step("unload adapters", retire) is None:
        return
    later_runs(root, args, check, work, (base, pushed), restart)


def later_runs(
    root: str,
    args: argparse.Namespace,
    check: Check,
    work: Path,
    weights: tuple[Any, Any],
    restart: Callable[[], None],
) -> None:
    """A second run on the same engine, then a resume after the engine restarted (new clients each)."""
    from coa.rollout import Codec

    codec = Codec.from_pretrained(args.model)
    prompt = codec.encode(PROMPT)
    base, pushed = weights

    def fresh_push(name: str, model: Any, version: int) -> EngineClient:
        client = open_engine(args.engine, root, NAME, timeout_s=300)  # type: ignore[arg-type]
        client.check()  # SGLang serves the last pushed folder's path now; vLLM reports its adapters
        folder = work / name
        model.save_pretrained(str(folder), safe_serialization=True)
        codec.tokenizer.save_pretrained(str(folder))
        client.push_weights(folder, version)
        return client

    def second_run() -> dict[str, Any]:
        client = fresh_push("second-v000000", base, 0)
        try:
            detail = under(client, root, codec, prompt, 0, (base, pushed), args.tol, "0")
            return detail | {"served": client.served_models()}
        finally:
            client.close()

    if check.step("second run: check, push v0, generate under v0", second_run) is None:
        return

    def after_restart() -> dict[str, Any]:
        restart()
        client = open_engine(args.engine, root, NAME, timeout_s=300)  # type: ignore[arg-type]
        try:
            client.check()
            client.adapters.add(2)  # type: ignore[attr-defined]  # the killed run's, which the engine lacks
            client.retire_adapters()
            unloaded = "student-v2: not held, no error"
        finally:
            client.close()
        client = fresh_push("resumed-v000001", pushed, 1)
        try:
            detail = under(client, root, codec, prompt, 1, (pushed, base), args.tol, "1")
            return detail | {"unloaded": unloaded}
        finally:
            client.close()

    check.step("restart: check, push v1, generate under v1", after_restart)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "sglang", "coa"], required=True)
    parser.add_argument("--model", required=True, help="a local HF model folder (the engine serves it)")
    parser.add_argument("--dry-run", action="store_true", help="coa.serve speaking the engine's protocol")
    parser.add_argument("--out", default="engine-check.json", help="the JSON record")
    parser.add_argument("--tol", type=float, default=0.1, help="mean |served - reference| logprob allowed")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--lora-targets", default="q_proj,v_proj")
    parser.add_argument(
        "--ready-timeout", type=float, default=900.0, help="seconds the engine may take to start"
    )
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    command, env = engine_command(
        args.engine, args.dry_run, args.model, port, args.lora_rank, args.lora_targets
    )
    command += extra
    stand_in = args.dry_run or args.engine == "coa"
    expected_kind = "sglang" if args.engine == "sglang" else ("coa" if stand_in else "vllm")
    record: dict[str, Any] = {"engine": args.engine, "dry_run": args.dry_run, "command": command, "env": env}
    check = Check(record)
    work = Path(tempfile.mkdtemp(prefix="engine-check-"))
    engines = [Engine(command, env, work / "engine.log")]

    def restart() -> None:
        """Stop the engine and start it again (same command, same port): its state is gone."""
        record["engine_exit_before_restart"] = engines[-1].stop()
        engines.append(Engine(command, env, work / "engine-restarted.log"))
        engines[-1].wait_ready(root, args.ready_timeout)

    code = 0
    try:
        try:
            engines[0].wait_ready(root, args.ready_timeout)
        except (RuntimeError, TimeoutError) as e:
            record["start_error"] = str(e)
            code = 3
        else:
            client = open_engine(args.engine, root, NAME, timeout_s=300)  # type: ignore[arg-type]
            try:
                run_checks(client, root, args, check, work, expected_kind, restart)
            finally:
                client.close()
            code = 0 if record["steps"] and all(s["ok"] for s in record["steps"]) else 1
    finally:
        record["engine_exit"] = engines[-1].stop()
        record["engine_log_tail"] = engines[-1].log_path.read_text(errors="replace")[-3000:]
        record["ok"] = code == 0
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(out)
        shutil.rmtree(work, ignore_errors=True)
    verdict = "ok" if code == 0 else "FAILED"
    print(f"engine-check: {args.engine}{' (dry run)' if args.dry_run else ''}: {verdict} -> {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
