"""Inspecting artifacts: ``coa show``, ``coa validate``, ``coa lineage`` and ``coa format check``."""

from __future__ import annotations

import json
import posixpath
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.table import Table

import schemas
from coa import io
from coa._cli.common import _fail, console, err


def _format_rows(path: str) -> list[dict[str, Any]]:
    """Rows with ``id`` and ``text`` from a JSONL file or an sft.v1 artifact/Parquet file."""
    if path.endswith(".jsonl"):
        fs, p = io.filesystem(path)
        rows = []
        with fs.open(p, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    row = {"id": f"line-{n + 1}", "text": None, "_error": str(e)}
                rows.append(row if isinstance(row, dict) else {"id": f"line-{n + 1}", "text": None})
        return rows
    ref = io.lookup(path)
    table = io.read_table(ref) if ref is not None else io.read_parquet_file(path)
    if "text" in table.column_names:
        ids = table.column("id").to_pylist() if "id" in table.column_names else list(range(table.num_rows))
        return [{"id": i, "text": t} for i, t in zip(ids, table.column("text").to_pylist(), strict=True)]
    if "messages" in table.column_names:
        id_col = "example_id" if "example_id" in table.column_names else None
        out = []
        for n, row in enumerate(table.select([c for c in (id_col, "messages") if c]).to_pylist()):
            assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
            out.append({"id": row.get(id_col) if id_col else n, "text": assistant[-1] if assistant else None})
        return out
    raise io.ArtifactError(f"{path} has neither a 'text' nor a 'messages' column")


def format_check(
    path: Annotated[
        str, typer.Argument(help="JSONL with id/text per line, or an sft.v1 artifact / Parquet file")
    ],
    variant: Annotated[str, typer.Option(help="Grammar variant: web | mhqa | code_math | afm")],
    lenient: Annotated[bool, typer.Option(help="Accept non-canonical whitespace (model output)")] = False,
) -> None:
    """Validate every row; print one JSON line per row {"id", "ok", "error"}; exit 0 iff all valid."""
    from coa.format import check_rows

    try:
        rows = _format_rows(path)
        results = check_rows(rows, variant, strict=not lenient)
        all_ok = True
        for result in results:
            all_ok = all_ok and result["ok"]
            typer.echo(json.dumps(result, ensure_ascii=False, default=str))
    except (ValueError, OSError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if not all_ok:
        raise typer.Exit(1)


# -- coa validate / show ---------------------------------------------------------------------


def _load_for_check(
    uri: str, schema_id: str | None
) -> list[tuple[str, schemas.Contract, pa.Table, list[str]]]:
    """(table name, contract, raw table, integrity problems) for an artifact folder or a Parquet file."""
    ref = io.lookup(uri)
    if ref is None:
        fs, path = io.filesystem(uri)
        if fs.isdir(path):
            raise io.ArtifactError(
                f"{uri} is a folder without a {io.MANIFEST} marker: not a committed artifact (never read)"
            )
        raw = io.read_parquet_file(uri)
        sid = schema_id or (raw.schema.metadata or {}).get(schemas.SCHEMA_ID_KEY, b"").decode()
        if not sid:
            raise io.ArtifactError(
                f"{uri} does not declare a schema id; pass --schema (one of {', '.join(schemas.ALL)})"
            )
        return [(posixpath.basename(uri), schemas.get(sid), raw, [])]
    out = []
    fs, path = io.filesystem(ref.uri)
    damaged = io.problems(ref)  # each file against the manifest's size and sha256
    for tname, info in ref.tables.items():
        problems = [f"{rel}: {damaged[rel]}" for rel in info.files if rel in damaged]
        parts = []
        for rel in info.files:
            try:
                with fs.open(posixpath.join(path, rel), "rb") as fh:
                    parts.append(pa.parquet.read_table(fh))
            except (OSError, pa.ArrowInvalid):
                if rel not in damaged:
                    raise
                # a truncated file does not parse: its integrity line says what is wrong
        contract = schemas.get(schema_id or info.schema_id)
        raw = pa.concat_tables(parts) if parts else contract.empty_table()
        out.append((tname, contract, raw, problems))
    in_tables = {rel for info in ref.tables.values() for rel in info.files}
    if out:  # damaged files outside the tables (a report, model weights) are reported too
        out[0][3].extend(f"{rel}: {why}" for rel, why in damaged.items() if rel not in in_tables)
    return out


def validate(
    uri: Annotated[str, typer.Argument(help="Artifact folder or Parquet file (local or s3://)")],
    schema: Annotated[
        str | None, typer.Option("--schema", help="Contract id, e.g. task.v1 (default: declared)")
    ] = None,
) -> None:
    """Check an artifact against its contract; print a per-column report; exit 1 on violation."""
    import pyarrow.parquet  # noqa: F401  (pa.parquet attribute)

    try:
        loaded = _load_for_check(uri, schema)
    except (io.ArtifactError, KeyError, OSError, pa.ArrowInvalid) as e:
        raise _fail(str(e)) from None
    ok = True
    for tname, contract, raw, problems in loaded:
        report = contract.check(raw)
        table = Table(title=f"{tname}: {contract.id}, {report.rows} rows")
        for col in ("column", "status", "detail"):
            table.add_column(col)
        for c in report.columns:
            style = "green" if c.ok else "bold red"
            table.add_row(c.column, f"[{style}]{c.status}[/]", c.detail)
        for p in problems:
            table.add_row("<integrity>", "[bold red]corrupt[/]", p)
        console.print(table)
        ok = ok and report.ok and not problems
    console.print("[green]valid[/]" if ok else "[bold red]contract violation[/]")
    if not ok:
        raise typer.Exit(1)


def show(
    uri: Annotated[str, typer.Argument(help="Artifact folder or Parquet file (local or s3://)")],
    table: Annotated[str | None, typer.Option("--table", "-t", help="Table to show (default: all)")] = None,
    rows: Annotated[int, typer.Option("--rows", "-n", help="Rows to print per table")] = 3,
) -> None:
    """Print schema, row count, lineage and a few rows of an artifact."""
    import pyarrow.parquet  # noqa: F401

    try:
        loaded = _load_for_check(uri, None)
        ref = io.lookup(uri)
        lineage = io.read_lineage(ref) if ref is not None else None
    except (io.ArtifactError, KeyError, OSError, pa.ArrowInvalid) as e:
        raise _fail(str(e)) from None
    if lineage is not None:
        console.rule("lineage")
        brief = {k: lineage[k] for k in ("kind", "name", "key", "content_hash", "code_version", "created_at")}
        brief["upstream"] = [u["uri"] for u in lineage.get("upstream", [])]
        console.print_json(json.dumps(brief, default=str))
    for tname, contract, raw, _ in loaded:
        if table and tname != table:
            continue
        console.rule(f"{tname}: {contract.id}, {raw.num_rows} rows")
        schema_table = Table(show_header=True)
        for col in ("column", "type", "doc"):
            schema_table.add_column(col)
        docs = schemas._contract.column_docs(contract)
        for field in raw.schema:
            schema_table.add_row(field.name, str(field.type), docs.get(field.name, "(not in contract)"))
        console.print(schema_table)
        for row in raw.slice(0, rows).to_pylist():
            console.print_json(_clip(row))
    damaged = [f"{tname}: {p}" for tname, _, _, problems in loaded for p in problems]
    if damaged:  # a damaged file is not an empty table: say so and fail (a failed check, exit 1)
        more = f" (+{len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise _fail(
            f"{uri} is damaged: {damaged[0]}{more}; the row counts above leave out what does not read. "
            "`coa validate` lists every problem; rebuild the artifact (rerun the step that made it)",
            code=1,
        )


def _clip(row: dict[str, Any], limit: int = 300) -> str:
    def clip(v: Any) -> Any:
        if isinstance(v, str) and len(v) > limit:
            return v[:limit] + f"… (+{len(v) - limit} chars)"
        if isinstance(v, list):
            return [clip(x) for x in v[:10]] + ([f"… (+{len(v) - 10} items)"] if len(v) > 10 else [])
        if isinstance(v, dict):
            return {k: clip(x) for k, x in v.items()}
        return v

    return json.dumps(clip(row), default=str, ensure_ascii=False)


def lineage(
    uri: Annotated[str, typer.Argument(help="Any committed artifact (model, eval, report…), local or s3://")],
    html: Annotated[
        str | None, typer.Option("--html", help="Also write a page with a picture of the DAG")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the graph as JSON instead of a tree")
    ] = False,
) -> None:
    """The lineage graph of an artifact back to its task sources, configs and code versions."""
    from coa.lineage import format_tree, trace, write_html

    graph = trace(uri)
    if as_json:
        typer.echo(json.dumps(graph.to_dict(), indent=2, default=str))
    else:
        typer.echo(format_tree(graph))
    if html:
        err.print(f"lineage page: {write_html(graph, html)}", highlight=False)
