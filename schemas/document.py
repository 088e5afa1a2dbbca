"""``document.v1``: one page of a local search collection (the synthetic encyclopedia).

Written by the synthetic step as its ``encyclopedia`` table; every step whose search is local
(collect, evaluate, sample, RL) reads it as an input and builds its BM25 index from it, so the
search serves the documents the multi-hop questions were drawn from. Rows are in collection order
(BM25 ties are broken by it).
"""

import pyarrow as pa

from schemas._contract import Column, Contract

DOCUMENT = Contract(
    name="document",
    version=1,
    doc="A page of a local search collection: a stable id, a title and plain text.",
    columns=(
        Column("doc_id", pa.string(), "Stable id of the page (its url is local://doc/<doc_id>)."),
        Column("title", pa.string(), "Title of the page (an entity's name, an event's)."),
        Column("text", pa.string(), "Plain text of the page."),
    ),
    unique=("doc_id",),
)
