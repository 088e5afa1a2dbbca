"""Weight updates of the completions server: a state dict read from a file and copied into the model.

A weight update (:mod:`coa.serve.admin`: vLLM's ``/update_weights``, ``/collective_rpc`` or SGLang's
``/update_weights_from_disk``) reads the directory the trainer pushed
(:func:`load_state_dict_file`: safetensors, a folder of them or a ``torch.save`` state dict) and
copies it into the running model in place (:func:`assign_weights`), between a pause and a resume
of the batcher (:mod:`coa.serve.engine`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def load_state_dict_file(path: str) -> Mapping[str, Any]:
    """Tensors of a safetensors file, a folder of them (sharded or not) or a ``torch.save`` state dict."""
    import os

    import torch
    from safetensors.torch import load_file

    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"no .safetensors file in {path}")
        state: dict[str, Any] = {}
        for name in files:
            state.update(load_file(os.path.join(path, name)))
        return state
    if path.endswith(".safetensors"):
        return load_file(path)
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(loaded, Mapping):
        raise ValueError(f"{path} holds a {type(loaded).__name__}, not a state dict")
    return loaded


def assign_weights(model: Any, state: Mapping[str, Any]) -> int:
    """Copy ``state`` into ``model``'s parameters and buffers in place; the number of tensors copied.

    Keys are the base model's names (what ``save_pretrained`` writes); under peft LoRA wrapping a
    ``x.weight`` lives at ``x.base_layer.weight`` and is found there. Every key must match a tensor
    of the same shape: a mismatch raises before anything is copied.
    """
    import torch

    own = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    plain = {_strip_peft(k): k for k in own}
    targets: dict[str, Any] = {}
    for key, value in state.items():
        name = key if key in own else plain.get(key) or plain.get(f"model.{key}")
        if name is None:
            raise KeyError(f"the model has no tensor {key!r}")
        if tuple(own[name].shape) != tuple(value.shape):
            raise ValueError(f"{key}: shape {tuple(value.shape)} != the model's {tuple(own[name].shape)}")
        targets[name] = value
    with torch.no_grad():
        for name, value in targets.items():
            own[name].copy_(value.to(own[name].dtype))
    tied = getattr(model.config, "tie_word_embeddings", False) if hasattr(model, "config") else False
    if tied and hasattr(model, "tie_weights"):
        model.tie_weights()
    return len(targets)


def _strip_peft(name: str) -> str:
    """A parameter name under peft (``base_model.model.x.base_layer.weight``) as the base model names it."""
    for prefix in ("base_model.model.",):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace(".base_layer.", ".")
