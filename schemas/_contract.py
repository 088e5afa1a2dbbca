"""The contract machinery shared by every artifact schema.

A :class:`Contract` is a pyarrow schema that carries its id and version (``task.v1``) in the
schema metadata and a docstring per column in the field metadata. Every read and every write of an
artifact goes through :meth:`Contract.conform`, the one check: it casts a table to the contract
where the cast is lossless (integer widening, string ↔ large_string, null-typed columns, …) and
otherwise raises :class:`ContractError` naming the column and the mismatch. :meth:`Contract.check`
runs the same rules but reports per column instead of raising (``coa validate`` prints it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from coa.errors import CheckFailed

SCHEMA_ID_KEY = b"coa.schema_id"
DOC_KEY = b"doc"
ALLOWED_KEY = b"allowed"


class ContractError(CheckFailed, ValueError):
    """A table does not satisfy a contract; ``column`` names where, the message says how."""

    def __init__(self, schema_id: str, column: str, problem: str) -> None:
        self.schema_id = schema_id
        self.column = column
        self.problem = problem
        super().__init__(f"{schema_id}: column {column!r}: {problem}")


@dataclasses.dataclass(frozen=True)
class Column:
    """One documented column of a contract."""

    name: str
    type: pa.DataType
    doc: str
    nullable: bool = False
    allowed: tuple[str, ...] | None = None  # closed value set for string columns

    def field(self) -> pa.Field:
        meta = {DOC_KEY: self.doc.encode()}
        if self.allowed is not None:
            meta[ALLOWED_KEY] = ",".join(self.allowed).encode()
        return pa.field(self.name, self.type, nullable=self.nullable, metadata=meta)


@dataclasses.dataclass(frozen=True)
class ColumnReport:
    """The outcome of checking one column: ``status`` is ok, cast, or an error kind."""

    column: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "cast")


@dataclasses.dataclass(frozen=True)
class ContractReport:
    """Per-column outcome of :meth:`Contract.check` on a table."""

    schema_id: str
    rows: int
    columns: tuple[ColumnReport, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.columns)

    def errors(self) -> list[ColumnReport]:
        return [c for c in self.columns if not c.ok]


@dataclasses.dataclass(frozen=True)
class Contract:
    """A versioned, documented pyarrow schema for one artifact kind."""

    name: str
    version: int
    doc: str
    columns: tuple[Column, ...]
    unique: tuple[str, ...] = ()  # columns whose values must be unique within an artifact

    @property
    def id(self) -> str:
        return f"{self.name}.v{self.version}"

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([c.field() for c in self.columns], metadata={SCHEMA_ID_KEY: self.id.encode()})

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.id} has no column {name!r}")

    def project(self, names: Sequence[str]) -> Contract:
        """This contract narrowed to the columns ``names`` (in that order): the same id, so a
        table read in part is checked against exactly the columns it holds."""
        columns = tuple(self.column(n) for n in names)
        return dataclasses.replace(self, columns=columns, unique=tuple(u for u in self.unique if u in names))

    def empty_table(self) -> pa.Table:
        return self.schema.empty_table()

    def from_rows(self, rows: Sequence[dict[str, Any]]) -> pa.Table:
        """Build a conforming table from Python dicts (missing nullable keys become null)."""
        names = [c.name for c in self.columns]
        for i, row in enumerate(rows):
            extra = set(row) - set(names)
            if extra:
                raise ContractError(
                    self.id, sorted(extra)[0], f"row {i} has a column the contract does not define"
                )
        arrays = []
        for c in self.columns:
            values = [row.get(c.name) for row in rows]
            try:
                arrays.append(pa.array(values, type=c.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                raise ContractError(self.id, c.name, f"cannot build {c.type} values: {e}") from e
        return self.conform(pa.Table.from_arrays(arrays, names=names))

    # -- the one check -------------------------------------------------------------------
    def conform(self, table: pa.Table) -> pa.Table:
        """Return ``table`` cast to this contract, or raise :class:`ContractError`."""
        report, conformed = self._run(table)
        bad = report.errors()
        if bad:
            first = bad[0]
            more = f" (and {len(bad) - 1} more column problem(s))" if len(bad) > 1 else ""
            raise ContractError(self.id, first.column, f"{first.status}: {first.detail}{more}")
        assert conformed is not None
        return conformed

    def check(self, table: pa.Table) -> ContractReport:
        """Check ``table`` against the contract and report per column, without raising."""
        return self._run(table)[0]

    def _run(self, table: pa.Table) -> tuple[ContractReport, pa.Table | None]:
        reports: list[ColumnReport] = []
        arrays: list[pa.ChunkedArray] = []
        declared = table.schema.metadata or {}
        declared_id = declared.get(SCHEMA_ID_KEY)
        if declared_id is not None and declared_id.decode() != self.id:
            reports.append(
                ColumnReport(
                    "<schema>",
                    "wrong schema id",
                    f"table declares {declared_id.decode()}, expected {self.id}",
                )
            )
        for col in self.columns:
            if col.name not in table.column_names:
                if col.nullable:
                    arrays.append(pa.chunked_array([pa.nulls(table.num_rows, col.type)]))
                    reports.append(
                        ColumnReport(col.name, "cast", "missing nullable column filled with nulls")
                    )
                else:
                    reports.append(
                        ColumnReport(col.name, "missing", f"required column of type {col.type} is absent")
                    )
                continue
            arr = table.column(col.name)
            status, detail = "ok", ""
            if arr.type != col.type:
                problem = lossless_cast_problem(arr.type, col.type)
                if problem:
                    reports.append(
                        ColumnReport(col.name, "type mismatch", f"{arr.type} -> {col.type}: {problem}")
                    )
                    continue
                try:
                    arr = arr.cast(col.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    reports.append(ColumnReport(col.name, "type mismatch", f"{arr.type} -> {col.type}: {e}"))
                    continue
                status, detail = "cast", f"cast losslessly from {table.column(col.name).type}"
            if not col.nullable and arr.null_count:
                reports.append(
                    ColumnReport(
                        col.name, "nulls", f"{arr.null_count} null value(s) in a non-nullable column"
                    )
                )
                continue
            if col.allowed is not None:
                bad = _values_outside(arr, col.allowed)
                if bad:
                    reports.append(
                        ColumnReport(col.name, "value not allowed", f"{bad!r}; allowed: {list(col.allowed)}")
                    )
                    continue
            if col.name in self.unique:
                dup = _first_duplicate(arr)
                if dup is not None:
                    reports.append(
                        ColumnReport(col.name, "duplicate", f"value {dup!r} occurs more than once")
                    )
                    continue
            reports.append(ColumnReport(col.name, status, detail))
            arrays.append(arr)
        known = {c.name for c in self.columns}
        for name in table.column_names:
            if name not in known:
                reports.append(ColumnReport(name, "unexpected column", "not defined by the contract"))
        report = ContractReport(self.id, table.num_rows, tuple(reports))
        if not report.ok:
            return report, None
        return report, pa.Table.from_arrays(arrays, schema=self.schema)


def _values_outside(arr: pa.ChunkedArray, allowed: Iterable[str]) -> list[str]:
    values = pc.unique(arr.drop_null()).to_pylist()
    return sorted(v for v in values if v not in set(allowed))[:5]


def _first_duplicate(arr: pa.ChunkedArray) -> Any:
    counts = pc.value_counts(arr.drop_null())
    if len(counts) == len(arr.drop_null()):
        return None
    for item in counts.to_pylist():
        if item["counts"] > 1:
            return item["values"]
    return None


_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_ORDER = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def lossless_cast_problem(src: pa.DataType, dst: pa.DataType) -> str | None:
    """Return why casting ``src`` to ``dst`` could lose information, or None if it cannot.

    Allowed: identical types, null → anything, integer widening (and unsigned → wider signed),
    small integers → float64, float32 → float64, string ↔ large_string, binary ↔ large_binary,
    dictionary-encoded values whose value type casts losslessly, timestamps to a finer unit (same
    time zone, or naive → UTC), and lists/structs whose children cast losslessly.
    """
    if src == dst or pa.types.is_null(src):
        return None
    if pa.types.is_dictionary(src):
        return lossless_cast_problem(src.value_type, dst)
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        if _int_fits(src, dst):
            return None
        return "integer narrowing or sign change could overflow"
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        if dst == pa.float64() and src.bit_width <= 32:
            return None
        return "integer to float may lose precision"
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return None if src.bit_width <= dst.bit_width else "float narrowing"
    strings = (pa.string(), pa.large_string(), pa.string_view())
    if src in strings and dst in strings:
        return None
    binaries = (pa.binary(), pa.large_binary())
    if src in binaries and dst in binaries:
        return None
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        units = ["s", "ms", "us", "ns"]
        if units.index(src.unit) > units.index(dst.unit):
            return f"timestamp unit {src.unit} is finer than {dst.unit}"
        if src.tz == dst.tz or (src.tz is None and dst.tz == "UTC"):
            return None
        return f"time zone {src.tz} differs from {dst.tz}"
    if _is_list(src) and _is_list(dst):
        return lossless_cast_problem(src.value_type, dst.value_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        src_fields = {src.field(i).name: src.field(i) for i in range(src.num_fields)}
        dst_names = {dst.field(i).name for i in range(dst.num_fields)}
        extra = set(src_fields) - dst_names
        if extra:
            return f"struct field {sorted(extra)[0]!r} is not in the contract"
        for i in range(dst.num_fields):
            f = dst.field(i)
            if f.name not in src_fields:
                if not f.nullable:
                    return f"struct field {f.name!r} is missing"
                continue
            problem = lossless_cast_problem(src_fields[f.name].type, f.type)
            if problem:
                return f"struct field {f.name!r}: {problem}"
        return None
    return f"no lossless cast from {src} to {dst}"


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)


def _int_fits(src: pa.DataType, dst: pa.DataType) -> bool:
    if pa.types.is_signed_integer(src):
        return pa.types.is_signed_integer(dst) and dst.bit_width >= src.bit_width
    if pa.types.is_unsigned_integer(dst):
        return dst.bit_width >= src.bit_width
    return dst.bit_width > src.bit_width


def column_docs(contract: Contract) -> dict[str, str]:
    """Column name → docstring, for reports and the README."""
    return {c.name: c.doc for c in contract.columns}
