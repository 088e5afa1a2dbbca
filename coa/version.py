"""Code version used in artifact addresses: package version + a hash of the source.

Any change to the domain code (``coa``, ``schemas``) changes the address of every artifact built
with it, so a stale result is never reused after the code that made it changed.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

import coa
import schemas

_SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".md", ".jinja", ".txt"}


def package_version() -> str:
    try:
        return metadata.version("coa-pipeline")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@functools.cache
def source_hash() -> str:
    h = hashlib.sha256()
    for pkg in (coa, schemas):
        root = Path(str(pkg.__file__)).parent
        for path in sorted(p for p in root.rglob("*") if p.suffix in _SOURCE_SUFFIXES):
            h.update(str(path.relative_to(root.parent)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def code_version() -> str:
    return f"{package_version()}+src.{source_hash()[:12]}"
