"""``python -m coa.serve``: serve a local HF model folder on 127.0.0.1 (see :mod:`coa.serve.app`).

Prints one line ``coa.serve: <name> on http://127.0.0.1:<port>/v1`` once it accepts connections
(``--port 0`` picks a free port; that line says which). SIGINT / SIGTERM shut it down cleanly: no
new connection, the running requests get a few seconds, the batcher stops, exit 0. A missing or
unreadable model folder exits 2 with one line.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m coa.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face model folder")
    parser.add_argument(
        "--served-model-name", default=None, help="the name requests use (default: the folder's)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="the port (0 = a free one, printed)")
    parser.add_argument("--max-batch", type=int, default=256, help="sequences in the running batch at most")
    parser.add_argument("--max-loras", type=int, default=8, help="LoRA adapters loaded at once at most")
    parser.add_argument(
        "--delay-per-token-ms",
        type=float,
        default=0.0,
        help="make every decode step last at least this long (benchmarks: a fixed time per token)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default torch's; 1 on a shared host)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--logprobs-mode",
        choices=("processed_logprobs", "raw_logprobs"),
        default="processed_logprobs",
        help="logprobs of the sampling distribution (after temperature), or raw ones (vLLM's default)",
    )
    parser.add_argument(
        "--protocol",
        choices=("vllm", "sglang"),
        default="vllm",
        help="whose admin routes and completion metadata to speak (vllm: its RL routes need "
        "VLLM_SERVER_DEV_MODE=1, as vLLM's; sglang: /pause_generation, /update_weights_from_disk, ...)",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    folder = Path(args.model)
    if not (folder / "config.json").is_file():
        print(
            f"input error: {folder} is not a model folder (no config.json); pass --model FOLDER",
            file=sys.stderr,
        )
        return 2
    import torch
    import uvicorn
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coa.serve.app import ModelServer
    from coa.serve.routes import create_app

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).to(args.device).eval()
    except (OSError, ValueError) as e:
        print(f"input error: cannot load the model in {folder}: {e}", file=sys.stderr)
        return 2
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError):
        tokenizer = None  # token ids only
    name = args.served_model_name or folder.name
    server = ModelServer(
        model,
        tokenizer,
        name=name,
        path=str(folder.resolve()),
        protocol=args.protocol,
        max_batch=args.max_batch,
        max_loras=args.max_loras,
        delay_per_token_s=args.delay_per_token_ms / 1000,
        logprobs_mode=args.logprobs_mode,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        print(
            f"infrastructure error: cannot bind {args.host}:{args.port}: {e}; pick another --port",
            file=sys.stderr,
        )
        return 3
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(server), log_level=args.log_level, timeout_graceful_shutdown=5, access_log=False
    )
    userver = uvicorn.Server(config)
    startup = userver.startup

    async def announce(sockets: list[socket.socket] | None = None) -> None:
        await startup(sockets=sockets)
        print(f"coa.serve: {name} on http://{args.host}:{port}/v1", flush=True)

    userver.startup = announce  # type: ignore[method-assign]
    # uvicorn handles SIGINT/SIGTERM (graceful shutdown, the lifespan stops the batcher), then restores
    # these handlers and raises the signal again: they make that a clean exit 0 instead of a kill.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    # what is loaded now lives until exit: out of the collector's sight, so neither serving nor the
    # interpreter's last collection at exit walks it (that walk took seconds over torch's objects)
    gc.freeze()
    userver.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
