"""Endpoints and tool sets declared once at the top of a profile (``endpoints:``, ``tools:``), keyed by
name, and named from the sections that use them: :func:`resolve_names` puts each declaration where
it is named, before any section is validated (the one place it happens; :mod:`coa.plan.config` calls
it). The slots a name stands in are :data:`ENDPOINT_SLOTS`, :data:`LLM_SLOTS` and
:data:`TOOL_SLOTS`; a declaration written inline in a slot is refused with the YAML to write instead
(:func:`migration`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel

ENDPOINT_SLOTS: tuple[tuple[str, str], ...] = (("evaluate", "endpoint"),)
"""Fields holding one endpoint (:class:`~coa.llm.config.EndpointConfig`): they take its name."""
LLM_SLOTS: tuple[tuple[str, str], ...] = (
    ("collect", "llm"),
    ("curate", "judge"),
    ("evaluate", "judge"),
    ("rl", "judge"),
)
"""Fields holding an :class:`~coa.llm.config.LLMConfig`: a name stands for an LLM config of that one
endpoint; in the long form (a budget, a cache, roles) its ``endpoints`` list holds names."""
TOOL_SLOTS: tuple[tuple[str, str], ...] = (("collect", "tools"), ("evaluate", "tools"), ("rl", "tools"))
"""Fields holding a :class:`~coa.tools.config.ToolsConfig`: they take its name."""
SLOTS = ENDPOINT_SLOTS + LLM_SLOTS + TOOL_SLOTS

NAMED_KEYS: dict[str, str] = {
    **{f"{s}.{f}": "tools" for s, f in TOOL_SLOTS},
    **{f"{s}.{f}": "endpoints" for s, f in ENDPOINT_SLOTS},
    **{f"{s}.{f}.endpoints": "endpoints" for s, f in LLM_SLOTS},
}
"""Every dotted key of a profile that holds names, and the top-level declarations they name (the
configuration reference shows these as names, not as the sections they stand for)."""

Names = dict[tuple[str, str], "str | tuple[str, ...]"]
"""The names a profile's slots held: a slot's name, or (an LLM slot's long form) its endpoints'."""


def _plain(value: Any) -> Any:
    """Plain data (lists, not tuples) of a declaration or a section (a model given in code, dumped)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=str))


def _declared(data: Mapping[str, Any], what: str) -> dict[str, Any]:
    found = data.get(what)
    if found is None:
        return {}
    if not isinstance(found, Mapping):
        raise ValueError(f"`{what}` must map names to declarations (got {type(found).__name__})")
    return {str(name): _plain(body) for name, body in found.items()}


def _endpoints(data: Mapping[str, Any]) -> dict[str, Any]:
    """The declared endpoints, each with its key as its ``name`` (the name caches and lineage use)."""
    out = _declared(data, "endpoints")
    for key, body in out.items():
        if isinstance(body, dict) and body.setdefault("name", key) != key:
            raise ValueError(
                f"endpoints.{key}: its name is its key; remove `name: {body['name']}` or rename the key"
            )
    return out


def _lookup(declared: Mapping[str, Any], name: str, where: str, what: str) -> Any:
    if name not in declared:
        have = ", ".join(sorted(declared)) or "none"
        raise ValueError(
            f"{where}: no {what} named {name!r} (declared under the profile's top-level `{what}:`: {have}); "
            f"declare it there"
        )
    return copy.deepcopy(declared[name])


def _flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style), as a profile or an override would write it."""
    if isinstance(value, str):
        return value
    return str(yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)).strip()


def _free(declared: Mapping[str, Any], wanted: str) -> str:
    """``wanted``, or ``wanted_2``, ``wanted_3``, … : the first name nothing declares."""
    taken = set(declared)
    return next(n for n in (wanted, *(f"{wanted}_{i}" for i in range(2, len(taken) + 3))) if n not in taken)


def migration(what: str, declare: Mapping[str, Any], section: str, field: str, written: Any) -> str:
    """How to write an inline declaration instead: the YAML that declares it once under ``what``
    (nothing when an equal one is declared) and the section naming it, then the same as overrides."""
    kind = "a tool set" if what == "tools" else "an endpoint (its key is its name)"
    lines = [
        f"{section}.{field}: {kind} is declared once, under the profile's top-level `{what}:`, and named "
        f"where it is used (inline is no longer read); write instead:"
    ]
    if declare:
        lines += [f"  {what}:"] + [f"    {name}: {_flow(body)}" for name, body in declare.items()]
    lines += [f"  {section}:", f"    {field}: {_flow(written)}"]
    sets = [f"{what}.{name}={_flow(body)}" for name, body in declare.items()]
    sets.append(f"{section}.{field}={_flow(written)}")
    sets = [f'"{one}"' if " " in one else one for one in sets]  # quoted for the shell
    lines.append(f"(as overrides: {' '.join(sets)})")
    return "\n".join(lines)


def _same(declared: Mapping[str, Any], body: Any) -> str | None:
    return next((name for name, known in declared.items() if known == body), None)


def _inline_tools(tools: Mapping[str, Any], section: str, field: str, value: Any) -> ValueError:
    body = _plain(value)
    name = _same(tools, body)
    if name is not None:
        return ValueError(migration("tools", {}, section, field, name))
    name = _free(tools, section)
    return ValueError(migration("tools", {name: body}, section, field, name))


def _inline_endpoints(
    endpoints: Mapping[str, Any],
    section: str,
    field: str,
    items: Sequence[Any],
    long: Mapping[str, Any] | None,
) -> ValueError:
    """The refusal of endpoints written inline: one item (``evaluate.endpoint``) or an LLM config's
    list (``long``: the rest of that LLM config, written back as it was)."""
    declare: dict[str, Any] = {}
    names: list[str] = []
    for item in items:
        if isinstance(item, str):
            names.append(item)
            continue
        body = _plain(item)
        key = str(body.pop("name", None) or _free({**endpoints, **declare}, section))
        same = _same(endpoints, {**body, "name": key})
        if same is None:
            key = key if key not in endpoints else _free({**endpoints, **declare}, key)  # another's
            declare[key] = body
        names.append(same or key)
    if long is None:
        return ValueError(migration("endpoints", declare, section, field, names[0]))
    return ValueError(migration("endpoints", declare, section, field, {**_plain(long), "endpoints": names}))


def resolve_names(data: Any) -> tuple[Any, Names]:
    """``data`` (a profile, before validation) with every name in a slot replaced by its declaration,
    and the names found (so a dump writes them back). A declaration written inline in a slot is
    refused with the YAML to write instead (:func:`migration`). A section given as a built stage
    config (code, not a profile) is taken as it is."""
    names: Names = {}
    if not isinstance(data, Mapping):
        return data, names
    endpoints, tools = _endpoints(data), _declared(data, "tools")
    out = dict(data)
    if "endpoints" in out:
        out["endpoints"] = endpoints
    for section, field in SLOTS:
        body = out.get(section)
        if not isinstance(body, Mapping) or body.get(field) is None:
            continue
        value, where = body[field], f"{section}.{field}"
        if (section, field) in TOOL_SLOTS:
            if not isinstance(value, str):
                raise _inline_tools(tools, section, field, value)
            names[section, field], value = value, _lookup(tools, value, where, "tools")
        elif (section, field) in ENDPOINT_SLOTS:
            if not isinstance(value, str):
                raise _inline_endpoints(endpoints, section, field, [value], None)
            names[section, field], value = value, _lookup(endpoints, value, where, "endpoints")
        elif isinstance(value, str):
            names[section, field] = value
            value = {"endpoints": [_lookup(endpoints, value, where, "endpoints")]}
        else:
            long = _plain(value) if isinstance(value, BaseModel) else dict(value)
            items = list(long.get("endpoints") or ())
            if not all(isinstance(item, str) for item in items):
                raise _inline_endpoints(endpoints, section, field, items, long)
            if items:
                names[section, field] = tuple(items)
            value = {
                **long,
                "endpoints": [_lookup(endpoints, i, f"{where}.endpoints", "endpoints") for i in items],
            }
        out[section] = {**body, field: value}
    return out, names


def beneath_a_name(data: Mapping[str, Any], key: str) -> str | None:
    """Why an override ``key`` beneath a slot that names a declaration cannot be applied: the one
    declaration is where it changes (or another one, named from that section)."""
    for section, field in SLOTS:
        slot = f"{section}.{field}"
        body = data.get(section)
        if not key.startswith(slot + ".") or not isinstance(body, Mapping):
            continue
        value, rest = body.get(field), key[len(slot) + 1 :]
        if isinstance(value, str):
            what = "tools" if (section, field) in TOOL_SLOTS else "endpoints"
            there = f"{what}.{value}.{rest}" if (section, field) not in LLM_SLOTS else f"endpoints.{value}.…"
            return (
                f"{slot} names `{value}`, declared once under `{what}:`: override it there ({there}: every "
                f"section naming it changes), or declare another under `{what}:` and name it from {slot}"
            )
        items = value.get("endpoints") if isinstance(value, Mapping) else None
        head, _, tail = rest.partition(".")
        if head == "endpoints" and items and tail[:1].isdigit():
            index, _, leaf = tail.partition(".")
            if int(index) < len(items) and isinstance(items[int(index)], str):
                name = items[int(index)]
                return (
                    f"{slot}.endpoints.{index} names `{name}`, declared once under `endpoints:`: override "
                    f"it there (endpoints.{name}.{leaf or '…'}: every section naming it changes)"
                )
    return None
