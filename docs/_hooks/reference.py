"""mkdocs hook: the reference pages, generated from the code at every build.

* ``reference/cli.md``: the ``--help`` of every ``coa`` command, produced by invoking the CLI's own
  parser in process (Typer's test runner), so a new command appears without touching the docs;
* ``reference/config.md``: every field of the pipeline configuration, walked from the root model
  (:class:`coa.plan.PipelineConfig`) through every nested section: dotted key, type,
  default and the field's description (:func:`config_keys`: its keys, which every profile's keys
  are checked against);
* ``reference/contracts.md``: every data contract in ``schemas.ALL``: the module's docstring and
  each column's type, nullability, allowed values and docstring.

The repository root goes first on ``sys.path`` so the pages describe this checkout's code, whatever
copy of the package the environment has installed.
"""

from __future__ import annotations

import html
import importlib
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PAGES = {
    "reference/cli.md": "cli_page",
    "reference/config.md": "config_page",
    "reference/contracts.md": "contracts_page",
}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the build (mkdocs calls this before it reads the nav)."""
    from mkdocs.structure.files import File

    for path, builder in PAGES.items():
        files.append(File.generated(config, path, content=globals()[builder]()))
    return files


# -- CLI ------------------------------------------------------------------------------------


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under ``group``, by name; as the group lists them (the stage commands are made
    when asked for: ``coa._cli.stages.StageCommands``)."""
    import typer

    ctx = typer.Context(group, info_name=prefix[-1] if prefix else "coa")
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        path = (*prefix, name)
        yield path, command
        if hasattr(command, "commands"):
            yield from _commands(command, path)


def _help(app: Any, path: tuple[str, ...]) -> str:
    from typer.testing import CliRunner

    env = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    result = CliRunner().invoke(app, [*path, "--help"], env=env, prog_name="coa")
    if result.exit_code != 0:
        raise RuntimeError(f"coa {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines).rstrip()


def cli_page() -> str:
    """Every command's ``--help``, top level first, then each command and sub-command by name."""
    from typer.main import get_command

    from coa.cli import app

    root = get_command(app)
    out = [
        "# CLI reference",
        "",
        "Generated at build time from `coa … --help` (the CLI's own parser, invoked in process): every "
        "command of this checkout is here. Errors are one line with the fix; exit codes: 0 success, "
        "1 a check failed, 2 bad input, 3 missing infrastructure.",
        "",
        "## coa",
        "",
        "```text",
        _help(app, ()),
        "```",
        "",
    ]
    for path, _ in _commands(root):
        out += [f"## coa {' '.join(path)}", "", "```text", _help(app, path), "```", ""]
    return "\n".join(out)


# -- configuration ----------------------------------------------------------------------------


def _models_in(annotation: Any) -> list[Any]:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[Any] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{name}[{inner}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(section)"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value) if value else "''"
    return repr(value) if isinstance(value, dict) else str(value)


def _walk(model: Any, prefix: str, seen: tuple[Any, ...]) -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, field, model) for every field below ``model``; list items as ``key.N``."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key, field, model
        for sub in _models_in(field.annotation):
            if sub in seen:
                continue
            origin = typing.get_origin(field.annotation)
            args = [a for a in typing.get_args(field.annotation) if a is not type(None)]
            container = origin in (tuple, list) or any(typing.get_origin(a) in (tuple, list) for a in args)
            mapping = origin is dict or any(typing.get_origin(a) is dict for a in args)
            step = f"{key}.N." if container else f"{key}.NAME." if mapping else f"{key}."
            yield from _walk(sub, step, (*seen, sub))


def config_keys() -> set[str]:
    """Every dotted key of the configuration reference (``N`` a list index, ``NAME`` a mapping key):
    what a profile may set; ``tests/test_profiles_reference.py`` checks every profile against it."""
    from coa.plan import PipelineConfig

    return {key for key, _, _ in _walk(PipelineConfig, "", (PipelineConfig,))}


def _cell(text: str) -> str:
    return html.escape(text).replace("|", "&#124;").replace("\n", " ")


def _code(text: str) -> str:
    """A table cell's code span that may break after '.', '|', ',' and '[' only (no word is cut)."""
    escaped = _cell(text)
    for mark in (".", "&#124;", ",", "["):
        escaped = escaped.replace(mark, mark + "<wbr>")
    return f"<code>{escaped}</code>"


def config_page() -> str:
    """One table per top-level section of the pipeline configuration."""
    from coa.plan import PipelineConfig

    root = PipelineConfig
    out = [
        "# Configuration reference",
        "",
        f"Generated at build time from the pydantic models, starting at "
        f"`{root.__module__}.{root.__name__}`: every key a profile (`configs/*.yaml`) or a "
        "`key.path=value` override may set. Every model is frozen and rejects unknown keys with the "
        "dotted path and a suggestion. `N` stands for a list index, `NAME` for a mapping key; "
        "`(section)` is a nested block whose keys follow; a section whose default is `null` is off "
        "until a profile sets it.",
        "",
    ]
    sections: dict[str, list[tuple[str, Any, Any]]] = {}
    for key, field, model in _walk(root, "", (root,)):
        sections.setdefault(key.split(".")[0], []).append((key, field, model))
    top = [k for k, _ in sections.items() if len(sections[k]) == 1]
    if top:
        out += ["## Top level", "", "| key | type | default | description |", "|---|---|---|---|"]
        for name in top:
            out.append(_row(*sections[name][0]))
        out.append("")
    for name, rows in sections.items():
        if name in top:
            continue
        section_model = _models_in(root.model_fields[name].annotation)[0]
        doc = (section_model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        out += [f"## {name}", "", f"`{section_model.__module__}.{section_model.__name__}`: {doc}", ""]
        out += ["| key | type | default | description |", "|---|---|---|---|"]
        out += [_row(*row) for row in rows]
        out.append("")
    return "\n".join(out)


def _row(key: str, field: Any, model: Any) -> str:
    description = field.description or _docstring_of(field) or ""
    return (
        f"| {_code(key)} | {_code(_type_name(field.annotation))} "
        f"| {_code(_default(field))} | {_cell(description)} |"
    )


def _docstring_of(field: Any) -> str:
    """A nested section without a description: the first paragraph of its model's docstring."""
    models = _models_in(field.annotation)
    if not models:
        return ""
    return (models[0].__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


# -- contracts -------------------------------------------------------------------------------


def contracts_page() -> str:
    """Every contract: what it is, its uniqueness rule and its documented columns."""
    import schemas

    out = [
        "# Data contracts",
        "",
        "Generated at build time from `schemas/` (`schemas.ALL`). Each contract is a pyarrow schema "
        "with its id in the schema metadata (`coa.schema_id`) and a docstring per column; every read "
        "and write of an artifact goes through one check that casts where lossless and otherwise "
        "fails naming the column (`coa validate URI` prints the per-column report, `coa show URI` the "
        "schema with these docstrings).",
        "",
        "| contract | what |",
        "|---|---|",
    ]
    for contract in schemas.ALL.values():
        anchor = contract.id.replace(".", "")
        out.append(f"| [`{contract.id}`](#{anchor}) | {_cell(contract.doc)} |")
    out.append("")
    for contract in schemas.ALL.values():
        module = importlib.import_module(f"schemas.{contract.name}")
        out += [f"## {contract.id}", "", f"Defined in `schemas/{contract.name}.py`.", ""]
        if module.__doc__:
            out += [_plain(module.__doc__), ""]
        if contract.unique:
            out += [f"Unique within an artifact: {', '.join(f'`{u}`' for u in contract.unique)}.", ""]
        out += ["| column | type | null | description |", "|---|---|---|---|"]
        for c in contract.columns:
            allowed = f" Allowed: {', '.join(c.allowed)}." if c.allowed else ""
            out.append(
                f"| {_code(c.name)} | {_code(str(c.type))} "
                f"| {'yes' if c.nullable else 'no'} | {_cell(c.doc + allowed)} |"
            )
        out.append("")
    return "\n".join(out)


def _plain(docstring: str) -> str:
    """A module docstring as Markdown: reST double backticks become code spans."""
    return docstring.strip().replace("``", "`")


def config_counts() -> dict[str, int]:
    """The size of the configuration, as the issues count it (``python docs/_hooks/reference.py``):

    * ``knobs``: the keys of :func:`config_keys` that hold a value, not a section (a list or mapping
      of sections counts its item's keys once, as ``N`` / ``NAME``);
    * ``classes``: the config models those keys walk through, :class:`~coa.plan.PipelineConfig`
      included;
    * ``declared_classes`` / ``declared_fields``: the pydantic models defined in ``coa/config.py``
      and ``coa/*/config.py`` (reachable from a profile or not: a step's run configs too) and the
      fields each declares itself (inherited ones counted where they are declared).
    """
    from pydantic import BaseModel

    from coa.plan import PipelineConfig

    walked = list(_walk(PipelineConfig, "", (PipelineConfig,)))
    knobs = [key for key, field, _ in walked if not _models_in(field.annotation)]
    classes = (
        {PipelineConfig}
        | {m for _, _, m in walked}
        | {sub for _, field, _ in walked for sub in _models_in(field.annotation)}
    )
    declared: list[type[BaseModel]] = []
    for path in sorted([REPO / "coa" / "config.py", *(REPO / "coa").glob("*/config.py")]):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == name
                and value.__name__ in (getattr(module, "__all__", None) or vars(module))
            ):
                declared.append(value)
    own = sum(len(cls.__annotations__.keys() & cls.model_fields.keys()) for cls in declared)
    return {
        "knobs": len(knobs),
        "classes": len(classes),
        "declared_classes": len(declared),
        "declared_fields": own,
    }


if __name__ == "__main__":
    for what, count in config_counts().items():
        print(f"{what}: {count}")
