"""``coa view``: a page of an artifact's episodes (collected runs, curated runs and their quarantine,
CoA SFT examples, RL rollouts, evaluations), written as one self-contained HTML file and, with
``--serve``, served on 127.0.0.1 (:mod:`coa.view`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from coa._cli.common import err


def view(
    uri: Annotated[
        str, typer.Argument(help="An artifact holding episodes, or a Parquet file (local or s3://)")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the page")] = Path("episodes.html"),
    teacher: Annotated[
        str | None,
        typer.Option(help="The teacher's runs (or evaluation) on the same tasks: shown beside each episode"),
    ] = None,
    cap: Annotated[
        int,
        typer.Option(help="Most episodes on the page; above it an evenly spaced sample, said on the page"),
    ] = 20_000,
    serve: Annotated[bool, typer.Option("--serve", help="Also serve the page on 127.0.0.1")] = False,
    port: Annotated[int, typer.Option(help="Port for --serve (0 = any free one)")] = 0,
    serve_for: Annotated[
        float, typer.Option(help="Seconds --serve keeps serving (Ctrl-C stops sooner)")
    ] = 3600.0,
) -> None:
    """Write one HTML page of an artifact's episodes: steps by role, masked spans, verdicts, filters."""
    from coa.view import episodes, page
    from coa.view import serve as serving

    started = time.monotonic()
    shown = episodes.load(uri, teacher, cap)
    path = page.write(shown, out)
    sample = f" (a sample of {shown.sampled_from:,})" if shown.sampled_from is not None else ""
    err.print(
        f"wrote {path}: {len(shown.episodes):,} episodes{sample}, {path.stat().st_size / 1e6:.1f} MB "
        f"in {time.monotonic() - started:.1f} s",
        highlight=False,
    )
    if serve:
        serving.serve_for(path, port, serve_for, lambda line: err.print(line, highlight=False))
