"""The engines' request and response shapes, transcribed (field names and types only) from their source.

Sources read: the wheels of vLLM 0.31.0 (``vllm-0.31.0-cp38-abi3-manylinux_2_28_x86_64.whl``) and
SGLang 0.5.23 (``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``), unpacked with ``pip download
--no-deps``; neither imports on a CPU box without its compiled dependencies, so the fields are
written out here with the file and lines each comes from. Neither engine refuses a field it does not
declare: vLLM's models accept and log it, SGLang drops it (its structs are decoded by msgspec,
``srt/utils/msgspec_utils.py``; its ``CompletionRequest`` is pydantic with the default ``ignore``).
So a misspelt field would be lost silently: the conformance test's mock engine refuses any field
the transcribed model does not declare (our check, stricter than either engine).

Also recorded: the answers a second run, a resume or a restart meets (a 404 ``NotFoundError`` for an
adapter vLLM does not hold, ``{"success": false}`` from a prefix-cache reset while requests run,
SGLang serving the pushed folder's path after an update).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Dropping(BaseModel):
    """An SGLang struct: unknown fields are dropped, not refused (msgspec / pydantic ``ignore``)."""

    model_config = ConfigDict(extra="ignore")


class Empty(Strict):
    """A route that reads no body (the body must be absent or empty)."""


# ---------------------------------------------------------------------- vLLM 0.31

VLLM_RLHF = "vllm/entrypoints/serve/dev/rlhf/api_router.py"


class VLLMPauseQuery(Strict):
    """``POST /pause`` query (rlhf/api_router.py:29-35): no body."""

    mode: Literal["abort", "wait", "keep"] = "abort"
    wait_for_inflight_requests: bool = False
    clear_cache: bool = True


class VLLMUpdateWeights(Strict):
    """``POST /update_weights`` (rlhf/api_router.py:186-201): ``update_info`` required (else 400)."""

    update_info: dict[str, Any]


class VLLMFinishWeightUpdate(Strict):
    """``POST /finish_weight_update`` (rlhf/api_router.py:204-210): ``weight_version`` embedded."""

    weight_version: str | None = None


class VLLMUpdateWeightVersion(Strict):
    """``POST /update_weight_version`` (rlhf/api_router.py:213-219): ``new_version`` embedded, required."""

    new_version: str


class VLLMCollectiveRPC(Strict):
    """``POST /collective_rpc`` (dev/rpc/api_router.py:23-43): only string args / kwargs."""

    method: str
    args: list[str] = []
    kwargs: dict[str, str] = {}
    timeout: float | None = None


class VLLMResetPrefixCacheQuery(Strict):
    """``POST /reset_prefix_cache`` query (dev/cache/api_router.py:20-24)."""

    reset_running_requests: bool = False
    reset_external: bool = False


class VLLMServerInfoQuery(Strict):
    """``GET /server_info`` query (dev/server_info/api_router.py:43-47)."""

    config_format: Literal["text", "json"] = "text"


class VLLMLoadLoRA(Strict):
    """``POST /v1/load_lora_adapter`` (vllm/entrypoints/serve/lora/protocol.py:7-11)."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class VLLMUnloadLoRA(Strict):
    """``POST /v1/unload_lora_adapter`` (serve/lora/protocol.py:14-16)."""

    lora_name: str
    lora_int_id: int | None = None


class VLLMInitWeightTransfer(Strict):
    """``POST /init_weight_transfer_engine``: ``init_info`` required (400 "Missing 'init_info'" otherwise).
    Transcribed from the reference note (engine-protocols.md, vLLM's RL routes table) and the body TRL
    1.16's client sends (trl/experimental/async_grpo/vllm_client.py, init_weight_transfer_engine);
    not re-read from vLLM 0.31's own source."""

    init_info: dict[str, Any]


class NCCLInitInfo(Strict):
    """The NCCL backend's ``init_info`` (engine-protocols.md: master_address, master_port, rank_offset,
    world_size; ``packed`` since vLLM 0.28, trl/experimental/async_grpo/weight_transfer.py)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = False


class NCCLUpdateInfo(Strict):
    """The NCCL backend's ``update_info`` (engine-protocols.md: names, dtype_names, shapes; ``packed``
    before vLLM 0.28): the server sizes its receive buffers from it."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    packed: bool = False


VLLM_NCCL_ROUTES = {
    ("GET", "/health"): (None, None),
    ("GET", "/get_world_size"): (None, None),  # read by TRL 1.16's client (vllm_client.py get_world_size)
    ("POST", "/init_weight_transfer_engine"): (None, VLLMInitWeightTransfer),
}
VLLM_NCCL_ANSWERS = {
    ("GET", "/health"): "",
    ("GET", "/get_world_size"): {"world_size": 1},
    ("POST", "/init_weight_transfer_engine"): {"message": "Weight transfer initialized"},
}


VLLM_COMPLETION_FIELDS = frozenset(
    # vllm/entrypoints/openai/completion/protocol.py:46-253, the fields of CompletionRequest
    [
        "model",
        "prompt",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "use_beam_search",
        "top_k",
        "min_p",
        "repetition_penalty",
        "watermarking",
        "length_penalty",
        "stop_token_ids",
        "include_stop_str_in_output",
        "ignore_eos",
        "min_tokens",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "truncate_prompt_tokens",
        "truncation_side",
        "allowed_token_ids",
        "prompt_logprobs",
        "logprob_token_ids",
        "bad_words",
        "prompt_embeds",
        "add_special_tokens",
        "response_format",
        "structured_outputs",
        "priority",
        "request_id",
        "session_id",
        "return_tokens_as_token_ids",
        "return_token_ids",
        "routed_experts_prompt_start",
        "return_token_offsets",
        "cache_salt",
        "kv_transfer_params",
        "ec_transfer_params",
        "vllm_xargs",
        "repetition_detection",
        "thinking_token_budget",
        "stream_interval",
    ]
)

VLLM_ROUTES: dict[tuple[str, str], tuple[type[BaseModel] | None, type[BaseModel] | None]] = {
    # (method, path): (query model, body model); None = nothing of that kind is read
    ("POST", "/pause"): (VLLMPauseQuery, None),
    ("POST", "/resume"): (None, None),  # rlhf/api_router.py:76-77
    ("GET", "/is_paused"): (None, None),  # rlhf/api_router.py:139-153
    ("POST", "/start_weight_update"): (None, None),  # rlhf/api_router.py:174-177 reads no body
    ("POST", "/update_weights"): (None, VLLMUpdateWeights),
    ("POST", "/finish_weight_update"): (None, VLLMFinishWeightUpdate),
    ("POST", "/update_weight_version"): (None, VLLMUpdateWeightVersion),
    ("GET", "/weight_info"): (None, None),  # rlhf/api_router.py:222-225
    ("POST", "/collective_rpc"): (None, VLLMCollectiveRPC),
    ("POST", "/reset_prefix_cache"): (VLLMResetPrefixCacheQuery, None),
    ("GET", "/server_info"): (VLLMServerInfoQuery, None),
    ("GET", "/v1/models"): (None, None),
    ("POST", "/v1/load_lora_adapter"): (None, VLLMLoadLoRA),
    ("POST", "/v1/unload_lora_adapter"): (None, VLLMUnloadLoRA),
    ("GET", "/version"): (None, None),  # {"version": VLLM_VERSION}, the api server's (file not re-read)
}

VLLM_ANSWERS: dict[tuple[str, str], Any] = {
    # the bodies the routes answer (the same files and lines)
    ("POST", "/pause"): {"status": "paused"},
    ("POST", "/resume"): {"status": "resumed"},
    ("GET", "/is_paused"): {"is_paused": False},
    ("POST", "/start_weight_update"): {"message": "Weight update started"},
    ("POST", "/update_weights"): {"message": "Weights updated"},
    ("POST", "/finish_weight_update"): {"message": "Weight update finished"},
    ("POST", "/update_weight_version"): {"success": True, "new_version": "?"},
    ("GET", "/weight_info"): {"weight_version": "default"},
    ("POST", "/collective_rpc"): {"results": ["ok"]},  # dev/rpc/api_router.py:47-54: str() of each result
    ("POST", "/reset_prefix_cache"): {"success": True},  # dev/cache/api_router.py:44
    # dev/server_info/api_router.py:48-59 (config_format=json: the VllmConfig as a JSON tree)
    ("GET", "/server_info"): {
        "vllm_config": {"model_config": {"dtype": "torch.bfloat16", "logprobs_mode": "processed_logprobs"}},
        "vllm_env": {},
        "system_env": {},
    },
    # vllm/entrypoints/openai/models/protocol.py ModelCard (owned_by "vllm", max_model_len)
    ("GET", "/v1/models"): {
        "object": "list",
        "data": [{"id": "student", "object": "model", "owned_by": "vllm", "max_model_len": 4096}],
    },
    ("POST", "/v1/load_lora_adapter"): "Success: LoRA adapter 'x' added successfully.",
    ("POST", "/v1/unload_lora_adapter"): "Success: LoRA adapter 'x' removed successfully.",
    ("GET", "/version"): {"version": "0.31.0"},
}

VLLM_UNKNOWN_ADAPTER = {
    # openai/models/serving.py _check_unload_lora_adapter_request: HTTP 404, through
    # serve/utils/error_response.py create_error_response -> ErrorResponse(error=ErrorInfo(...))
    "error": {
        "message": "The lora adapter 'student-v1' cannot be found.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
}
VLLM_NO_ROUTE = {"detail": "Not Found"}  # FastAPI's 404 for a route vLLM did not mount
VLLM_RESET_REFUSED = {"success": False}  # dev/cache/api_router.py: the block pool refused (blocks in use)

VLLM_COMPLETION = {
    # CompletionResponse (completion/protocol.py:641-649), CompletionResponseChoice (:613-628),
    # CompletionLogProbs (:606-610); no weight version anywhere
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 0,
    "model": "student",
    "choices": [
        {
            "index": 0,
            "text": "",
            "logprobs": {
                "text_offset": [],
                "token_logprobs": [-0.5, -1.25],
                "tokens": ["token_id:7", "token_id:9"],
                "top_logprobs": [{"token_id:7": -0.5}, {"token_id:9": -1.25}],
            },
            "finish_reason": "length",
            "stop_reason": None,
            "token_ids": [7, 9],
            "prompt_logprobs": None,
            "prompt_token_ids": [1, 2, 3],
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}

# ---------------------------------------------------------------------- SGLang 0.5.23

SGLANG_IO = "sglang/srt/managers/io_struct.py"


class SGLangBaseReq(Dropping):
    """BaseReq (io_struct.py:86-90): every request struct's own fields."""

    rid: str | None = None
    http_worker_ipc: str | None = None


class SGLangPause(SGLangBaseReq):
    """PauseGenerationReqInput (io_struct.py:1927-1946)."""

    mode: Literal["abort", "retract", "in_place"] = "abort"


class SGLangContinue(SGLangBaseReq):
    """ContinueGenerationReqInput (io_struct.py:1949-1955)."""

    torch_empty_cache: bool = True


class SGLangUpdateFromDisk(SGLangBaseReq):
    """UpdateWeightFromDiskReqInput (io_struct.py:1970-1993)."""

    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True
    manifest: dict[str, Any] | None = None  # the same struct: an optional file manifest


class SGLangLoadLoRA(SGLangBaseReq):
    """LoadLoRAAdapterReqInput (io_struct.py:2516-2524)."""

    lora_name: str
    lora_path: str
    pinned: bool = False
    lora_id: str | None = None  # set by the tokenizer manager


class SGLangUnloadLoRA(SGLangBaseReq):
    """UnloadLoRAAdapterReqInput (io_struct.py:2535-2539)."""

    lora_name: str
    lora_id: str | None = None


SGLANG_COMPLETION_FIELDS = frozenset(
    # sglang/srt/entrypoints/openai/protocol.py:365-467, the fields of CompletionRequest
    [
        "model",
        "prompt",
        "best_of",
        "echo",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "suffix",
        "temperature",
        "top_p",
        "user",
        "return_hidden_states",
        "return_routed_experts",
        "routed_experts_start_len",
        "return_cached_tokens_details",
        "return_spec_tokens_details",
        "return_token_ids",
        "top_k",
        "min_p",
        "min_tokens",
        "json_schema",
        "regex",
        "ebnf",
        "repetition_penalty",
        "stop_token_ids",
        "stop_regex",
        "no_stop_trim",
        "ignore_eos",
        "skip_special_tokens",
        "lora_path",
        "session_id",
        "session_params",
        "response_format",
        "custom_params",
        "custom_logit_processor",
        "watermark",
        "images_config",
        "mm_processor_kwargs",
        "data_parallel_rank",
        "rid",
        "extra_key",
        "cache_salt",
        "priority",
        "custom_labels",
    ]
)

SGLANG_ROUTES: dict[tuple[str, str], tuple[type[BaseModel] | None, type[BaseModel] | None]] = {
    # sglang/srt/entrypoints/http_server.py
    ("POST", "/pause_generation"): (None, SGLangPause),  # :1831-1841
    ("POST", "/continue_generation"): (None, SGLangContinue),  # :1844-1854
    ("POST", "/update_weights_from_disk"): (None, SGLangUpdateFromDisk),  # :1300-1326
    ("GET", "/model_info"): (None, None),  # :812-840
    ("GET", "/v1/models"): (None, None),  # :1993-2022 (loaded adapters listed, parent: the base)
    ("POST", "/load_lora_adapter"): (None, SGLangLoadLoRA),  # :1652-1660
    ("POST", "/unload_lora_adapter"): (None, SGLangUnloadLoRA),  # :1676-1684
}

SGLANG_ADMIN_ROUTES = frozenset(
    # the routes http_server.py marks @auth_level(AuthLevel.ADMIN_OPTIONAL) that a client of ours calls
    # (:1025 flush_cache, :1300 update_weights_from_disk, :1527 update_weight_version, :1652
    # load_lora_adapter, :1676 unload_lora_adapter, :1831 pause_generation, :1844 continue_generation);
    # the others it calls (/v1/completions :1860, /v1/models :1993, /model_info :812) are NORMAL
    [
        "/flush_cache",
        "/update_weights_from_disk",
        "/update_weight_version",
        "/load_lora_adapter",
        "/unload_lora_adapter",
        "/pause_generation",
        "/continue_generation",
    ]
)


def sglang_auth(path: str, authorization: str | None, api_key: str | None, admin_key: str | None) -> int:
    """The status SGLang's key middleware gives a request (200: let through), the rules of
    ``sglang/srt/utils/auth.py`` ``decide_request_auth``: health routes always pass; an admin route
    takes the admin key when one is set (and then refuses the api key), else the api key when set,
    else anything; any other route takes the api key when one is set (never the admin key), else
    anything. A refusal is 401 ``{"error": "Unauthorized"}`` (``add_api_key_middleware``)."""
    if path.startswith(("/health", "/ready", "/metrics")):
        return 200
    expected = (admin_key or api_key) if path in SGLANG_ADMIN_ROUTES else api_key
    if expected is None:
        return 200
    return 200 if authorization == f"Bearer {expected}" else 401


SGLANG_UNAUTHORIZED = {"error": "Unauthorized"}

SGLANG_ANSWERS: dict[tuple[str, str], Any] = {
    ("POST", "/pause_generation"): {"message": "Generation paused successfully.", "status": "ok"},
    ("POST", "/continue_generation"): {"message": "Generation continued successfully.", "status": "ok"},
    ("POST", "/update_weights_from_disk"): {"success": True, "message": "ok", "num_paused_requests": 0},
    ("GET", "/model_info"): {"model_path": "/m", "is_generation": True, "weight_version": "default"},
    ("GET", "/v1/models"): {"object": "list", "data": [{"id": "student", "owned_by": "sglang"}]},
    # LoRAUpdateOutput (io_struct.py:2572-2575), lora_manager.py create_lora_update_result: name -> path
    ("POST", "/load_lora_adapter"): {"success": True, "error_message": "", "loaded_adapters": {}},
    ("POST", "/unload_lora_adapter"): {"success": True, "error_message": "", "loaded_adapters": {}},
}

SGLANG_LORA_ALREADY_LOADED = {
    # HTTP 400 (http_server.py:1659): lora_manager.py validate_new_adapter, through _load_lora_adapter
    "success": False,
    "error_message": "Failed to load LoRA adapter student-v1 because it is already loaded",
    "loaded_adapters": {"student-v1": "/left/v000001"},
}
SGLANG_LORA_UNKNOWN = {
    # HTTP 400 (http_server.py:1683): lora_registry.py unregister's ValueError, caught by
    # tokenizer_control_mixin.py unload_lora_adapter (no loaded_adapters)
    "success": False,
    "error_message": "LoRA with name student-v1 does not exist. Loaded LoRAs: dict_keys([])",
    "loaded_adapters": None,
}
SGLANG_LORA_DISABLED = {
    # HTTP 400: tokenizer_control_mixin.py load_lora_adapter on a server started without --enable-lora
    "success": False,
    "error_message": "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.",
    "loaded_adapters": None,
}

SGLANG_RENAMED = {
    # after a successful update_weights_from_disk (srt/managers/tokenizer_manager.py, the update
    # handler): the served model name follows model_path, until SGLang restarts
    ("GET", "/model_info"): {"model_path": "/ckpt/v000002", "is_generation": True, "weight_version": "2"},
    ("GET", "/v1/models"): {"object": "list", "data": [{"id": "/ckpt/v000002", "owned_by": "sglang"}]},
}

SGLANG_COMPLETION = {
    # CompletionResponse (openai/protocol.py:528-536) with metadata from
    # build_endpoint_weight_version_metadata (utils/weight_versions.py:113-117); a span is a
    # span per WeightVersionSpan (weight_versions.py:17-20), serialized as an object {version, start, end}
    "id": "1",
    "object": "text_completion",
    "created": 0,
    "model": "student",
    "choices": [
        {
            "index": 0,
            "text": "",
            "logprobs": {"text_offset": [], "token_logprobs": [-0.5], "tokens": ["a"], "top_logprobs": [{}]},
            "finish_reason": "stop",
            "matched_stop": "</answer>",
            "token_ids": [7],
            "prompt_token_ids": [1, 2, 3],
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    "metadata": {"weight_version": "4", "weight_versions": [{"version": "3", "start": 0, "end": 1}]},
}
