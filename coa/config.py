"""Typed, layered pipeline configuration.

Layers, each overriding the one before: code defaults (the pydantic models below) → a YAML profile
(``configs/demo.yaml``), which may name a parent with ``inherit: base.yaml`` → dotted ``key=value``
overrides from the CLI or Prefect deployment parameters. Every model is frozen and forbids unknown
keys, so a typo fails with the dotted path of the bad key (and a suggestion). Environment variables
carry infrastructure only (storage root, S3, LLM endpoints and keys, Prefect API): see
:mod:`coa.settings`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    create_model,
    model_serializer,
)

from coa.errors import UserError

INHERIT_KEY = "inherit"


class ConfigError(UserError, ValueError):
    """A configuration problem, with the dotted path of the offending key."""


class StrictModel(BaseModel):
    """Base for every config: immutable, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Overrides(StrictModel):
    """Overrides of some fields of a config section: a field left unset overrides nothing.

    Made by :func:`overrides_of` from the section's own model, so it has the section's fields, types
    and bounds and never a second declaration of them. It dumps only the fields set (a profile's
    overrides, as written), and :meth:`over` lays them over a section."""

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    def over(self, section: M) -> M:
        """``section`` with these overrides laid over it, validated as a whole again."""
        return type(section).model_validate(section.model_dump() | self.model_dump())


M = TypeVar("M", bound=BaseModel)


def overrides_of(model: type[BaseModel], name: str, doc: str, module: str) -> type[Overrides]:
    """The :class:`Overrides` model of ``model``: each of its fields, optional and unset by default, with
    its type, bounds and description. A cross-field check of ``model`` runs on the result of
    :meth:`Overrides.over`. ``name`` and ``module`` are where the model is declared (for its
    ``repr``, pickling and the generated reference)."""
    fields: dict[str, Any] = {}
    for field_name, field in model.model_fields.items():
        annotation: Any = field.annotation
        if field.metadata:
            annotation = Annotated[(annotation, *field.metadata)]
        if type(None) not in get_args(field.annotation):
            annotation = annotation | None
        fields[field_name] = (annotation, Field(default=None, description=field.description))
    made: type[Overrides] = create_model(name, __base__=Overrides, __doc__=doc, __module__=module, **fields)
    return made


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


# -- loading -------------------------------------------------------------------------------


def load_yaml_layers(path: str | Path) -> dict[str, Any]:
    """Read a YAML profile, merging the chain of ``inherit:`` parents first (paths are relative)."""
    path = Path(path)
    seen: list[Path] = []
    layers: list[dict[str, Any]] = []
    while True:
        resolved = path.resolve()
        if resolved in seen:
            raise ConfigError(f"{path}: 'inherit' cycle through {' -> '.join(map(str, seen))}")
        seen.append(resolved)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: invalid YAML: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
        parent = data.pop(INHERIT_KEY, None)
        layers.append(data)
        if parent is None:
            break
        path = path.parent / str(parent)
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged = deep_merge(merged, layer)
    return merged


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``top`` wins; lists are replaced, not concatenated."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply dotted ``a.b.0.c=value`` overrides; values are parsed as YAML scalars/lists."""
    out: dict[str, Any] = json.loads(json.dumps(data))  # deep copy of plain data
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.path=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {key}: cannot parse value {raw!r}: {e}") from e
        if (glued := _glued_key(value)) is not None:
            spaced = re.sub(r"(?<=[\w-]):(?=[^/\s])", ": ", raw)
            name, first = glued.split(":", 1)
            one_key = f" or one override a key, such as {key}.{name}={first}" if glued in value else ""
            raise ConfigError(
                f"override {key}: {raw!r} parses as the key {glued!r} with no value (YAML needs a space "
                f"after the colon in a mapping): write {key}={spaced!r} (quoted in the shell){one_key}"
            )
        parts = key.strip().split(".")
        node: Any = out
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(
                        f"override {key}: {where} is not a valid index into a list of {len(node)}"
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError(f"override {key}: {'.'.join(parts[:depth])} is a value, not a section")
    return out


_GLUED = re.compile(r"[A-Za-z_][\w.-]*:[^/\s]")  # name:value, not a URL (http://…)


def _glued_key(value: Any) -> str | None:
    """The first mapping key in ``value`` that is ``name:value`` with no value of its own: what YAML
    makes of ``{code:6}`` (a flow mapping whose colons lack the space after them)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if v is None and isinstance(k, str) and _GLUED.match(k):
                return k
            if (inner := _glued_key(v)) is not None:
                return inner
    elif isinstance(value, list):
        for v in value:
            if (inner := _glued_key(v)) is not None:
                return inner
    return None


def build_config(data: Mapping[str, Any], model: type[StrictModel], origin: str = "config") -> Any:
    """Validate plain data into ``model``; errors name the bad keys' dotted paths.

    The pipeline's own model is :class:`coa.plan.PipelineConfig`
    (:func:`coa.plan.load_pipeline_config` loads a profile into it).
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain(e, model, origin)) from None


def load_config(path: str | Path | None, overrides: Sequence[str] = (), *, model: type[StrictModel]) -> Any:
    """Code defaults → YAML profile (with ``inherit`` chain) → dotted overrides, validated."""
    data = load_yaml_layers(path) if path is not None else {}
    data = apply_overrides(data, overrides)
    return build_config(data, model, origin=str(path) if path else "config")


def _explain(error: ValidationError, model: type[BaseModel], origin: str) -> str:
    lines = [f"{origin}: invalid configuration ({error.error_count()} problem(s)):"]
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if not err["loc"] and err["type"] == "value_error":  # a whole-config check: its message says it all
            lines.append(f"  - {err['msg'].removeprefix('Value error, ')}")
        elif err["type"] == "extra_forbidden":
            hint = _suggest(model, err["loc"])
            lines.append(f"  - {loc}: unknown key{hint}")
        else:
            lines.append(f"  - {loc}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def _suggest(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """Walk the model along ``loc`` and suggest the closest valid key for the last element."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return ""
        current = _model_of(fields[part].annotation)
        if current is None:
            return ""
    fields = getattr(current, "model_fields", {})
    close = difflib.get_close_matches(str(loc[-1]), list(fields), n=1)
    valid = ", ".join(fields)
    return f" (did you mean {close[0]!r}?)" if close else f" (valid keys: {valid})"


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None
