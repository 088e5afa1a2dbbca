"""The local search's collection: the documents a step's ``local_bm25`` search and its crawler's
``local://doc/<id>`` pages serve, read from the table handed to the step.

The table is the synthetic step's ``encyclopedia`` (``document.v1``): collect, evaluate, sample and
RL take it as their ``encyclopedia`` input, so a local search always serves the documents the tasks
were drawn from, and the table's content hash is in each step's key. Nothing here rebuilds a
collection from a seed. A step without the input (tasks imported from benchmarks, searched through
a remote provider) has no collection; a local search then refuses to start
(:func:`require_collection`), saying what to configure.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pyarrow as pa

import schemas
from coa.errors import UserError
from coa.inputs import ModelInput, TableInput
from coa.io import read_parquet_file
from coa.tools.config import SearchConfig, ToolsConfig
from coa.tools.search import LocalDocument

INPUT = "encyclopedia"
"""The input role under which a step takes its collection."""


@dataclasses.dataclass(frozen=True)
class Collection:
    """The documents of a local search, in collection order (BM25 breaks ties by it), and a name
    that changes with their content (part of the observation store's provider names, so a
    recording of one collection is never replayed for another)."""

    documents: tuple[LocalDocument, ...]
    name: str

    @classmethod
    def from_table(cls, table: pa.Table) -> Collection:
        """The collection of a ``document.v1`` table."""
        rows = schemas.DOCUMENT.conform(table).to_pydict()
        documents = tuple(
            LocalDocument(i, t, x)
            for i, t, x in zip(rows["doc_id"], rows["title"], rows["text"], strict=True)
        )
        digest = hashlib.sha256()
        for d in documents:
            digest.update(f"{d.id}\0{d.title}\0{d.text}\n".encode())
        return cls(documents, f"encyclopedia:{len(documents)}:{digest.hexdigest()[:16]}")


def read_collection(source: TableInput | ModelInput | None) -> Collection | None:
    """The collection of a step's ``encyclopedia`` input; None when the step has none."""
    if source is None:
        return None
    if not isinstance(source, TableInput):
        raise TypeError(f"the {INPUT} input must be a document.v1 table, not the model {source.name}")
    return Collection.from_table(source.read())


def read_collection_file(path: str | None) -> Collection | None:
    """The collection of a Parquet file of ``document.v1`` rows (a launched trainer's copy); None
    for no file."""
    return None if path is None else Collection.from_table(read_parquet_file(path))


def local_searches(config: ToolsConfig) -> list[str]:
    """The enabled search tools that search the local collection (``local_bm25`` with no saved
    ``index_dir``)."""
    enabled: list[tuple[str, SearchConfig]] = [("web_search", config.search), ("wiki_search", config.wiki)]
    return [
        name
        for name, search in enabled
        if name in config.enabled and search.provider == "local_bm25" and search.index_dir is None
    ]


def require_collection(config: ToolsConfig, collection: Collection | None, fix: str) -> None:
    """Refuse a local search with no collection to serve, naming the way out; ``fix`` is where the
    stage's tools are configured (``collect.tools``)."""
    local = local_searches(config)
    if collection is not None or not local:
        return
    key = {"web_search": "search", "wiki_search": "wiki"}[local[0]]
    raise UserError(
        f"{local[0]} is a local search ({fix}.{key}.provider: local_bm25) but this step was given no "
        f"encyclopedia to search: the collection is the synthetic step's `{INPUT}` table, which the plan "
        "hands to every step whose search is local. Add a `synthetic` section to the profile, or search "
        f"through a remote provider ({fix}.{key}.provider: serper | retrieve), or a saved index "
        f"({fix}.{key}.index_dir)"
    )
