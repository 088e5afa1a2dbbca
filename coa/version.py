"""Code versions: the whole tree's, and the part of it a step depends on.

* :func:`code_version`: the package version and a hash of every source file of ``coa`` and
  ``schemas``; every artifact's lineage records it (which code built it, exactly);
* :func:`step_files` / :func:`files_version`: what a step's content key hashes
  (:meth:`coa.steps.Stage.code_version`): the import closure of its build module within the
  project, found by compiling (``import`` and ``from … import`` anywhere in a file, the package
  ``__init__``s Python runs, each reached package's data files), and the modules of the data
  contracts it reads and writes. A CLI help string, a docs page or an unrelated stage is outside
  it, so editing them rebuilds nothing; an edit to anything the build can run re-keys the step.
  Of a Python file, only its code counts (:func:`code_text`: comments and docstrings removed), and
  the modules that move bytes or record what happened without deciding any value a step computes
  (:data:`UNKEYED`: storage, trackers, resource readings, presentation) are left out of every key.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import io
import tokenize
import types
from collections.abc import Iterator
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


# -- the code a step depends on -----------------------------------------------------------------

_PACKAGES = ("coa", "schemas")
"""The project's packages: imports of anything else (the standard library, torch, pins) are not
followed; the dependency pins are the environment's, not the step's code."""
_DATA_SUFFIXES = {".yaml", ".yml", ".json", ".jinja", ".txt"}
UNKEYED = (
    "coa/io/",  # storage: where and how bytes are written and read (its round trips are tested)
    "coa/tracking/",  # experiment trackers: what is recorded of a run, not the run
    "coa/facts.py",  # what a step presents
    "coa/resources.py",  # peak memory readings
    "coa/settings.py",  # where the store is (a step's address holds the store, not its key)
    "coa/heartbeat.py",  # a dispatched run's lease
    "coa/progress.py",  # how far a build is
    "coa/version.py",  # this file: how keys are computed (a change here re-keys by its own effect)
)
"""Files reached by every step's closure that cannot change a step's output: outside every key, so
a fix to the store's retries or a tracker rebuilds nothing. Their imports are still followed."""
"""Data a package reads at run time (prompt templates, grammars): hashed with its package's code."""


def _source_root() -> Path:
    return Path(str(coa.__file__)).parent.parent


def _module_file(module: str) -> Path | None:
    """The source file of a project module (a package's ``__init__.py``); None outside the project."""
    if module.split(".")[0] not in _PACKAGES:
        return None
    base = _source_root().joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _import_statements(code: types.CodeType) -> Iterator[tuple[str, int, tuple[str, ...]]]:
    """(module, level, names) of every import in ``code`` and the code nested in it (functions,
    classes, ``if TYPE_CHECKING:`` blocks): each ``IMPORT_NAME`` instruction with the level and the
    from-list the compiler loads just before it."""
    todo = [code]
    while todo:
        current = todo.pop()
        instructions = list(dis.get_instructions(current))
        for i, instruction in enumerate(instructions):
            if instruction.opname != "IMPORT_NAME":
                continue
            level, names = 0, ()
            if i >= 2 and instructions[i - 1].opname == "LOAD_CONST":
                level = instructions[i - 2].argval if isinstance(instructions[i - 2].argval, int) else 0
                names = tuple(instructions[i - 1].argval or ())
            yield str(instruction.argval), level, names
        todo += [c for c in current.co_consts if isinstance(c, types.CodeType)]


@functools.cache
def _imports(module: str) -> tuple[str, ...]:
    """The project modules ``module`` imports anywhere in its file (at the top, in a function, under
    ``TYPE_CHECKING``): static, so a lazy import counts as a dependency too.

    Read from the bytecode ``compile`` makes, not from ``ast.parse``: CPython 3.11's AST objects
    share one recursion counter between threads, so a parse on one thread while another (ours or
    Prefect's) builds an AST fails with "AST constructor recursion depth mismatch"; compiling to
    bytecode builds no Python AST objects."""
    path = _module_file(module)
    if path is None:
        return ()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for name, level, names in _statements(path.read_bytes(), str(path)):
        base = name
        if level:
            parts = package.split(".")
            parts = parts[: len(parts) - level + 1]
            base = ".".join([*parts, name] if name else parts)
        found.add(base)
        found.update(f"{base}.{n}" for n in names if n != "*")  # `from coa import io`: a submodule
    return tuple(sorted(m for m in found if _module_file(m) is not None))


@functools.cache
def _statements(source: bytes, filename: str) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    """The import statements of a file's ``source``, by its content: a file read again unchanged (the
    keys recomputed after an edit elsewhere) is not compiled again."""
    return tuple(_import_statements(compile(source, filename, "exec", dont_inherit=True)))


def _parents(module: str) -> list[str]:
    """The packages Python runs before ``module`` (``coa``, ``coa.train`` for ``coa.train.step``)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@functools.cache
def closure(module: str, parents: bool = True) -> tuple[Path, ...]:
    """The files of the project's import closure of ``module`` (its package ``__init__``s included
    unless ``parents`` is False: a contract's closure skips ``schemas/__init__``, which imports every
    contract), with the data files of every package it reaches; sorted, so the hash is deterministic."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen or _module_file(current) is None:
            continue
        seen.add(current)
        todo += [*_imports(current), *(_parents(current) if parents else [])]
    files = {p for m in seen if (p := _module_file(m)) is not None}
    for folder in {p.parent for p in files}:
        for data in folder.rglob("*"):
            if data.suffix in _DATA_SUFFIXES and not _in_subpackage(data, folder):
                files.add(data)
    return tuple(sorted(files))


def _in_subpackage(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies in a subpackage of ``folder`` (hashed only when that package is reached)."""
    return any(
        (parent / "__init__.py").is_file()
        for parent in path.parents
        if parent != folder and parent.is_relative_to(folder)
    )


def code_text(source: bytes) -> bytes:
    """A Python file's code without its comments, docstrings (a statement that is only a string
    literal: a module's, class's or function's docstring, an attribute's) and blank lines; the same
    text on Python 3.11 and 3.12 (the GPU image's), whose tokenizers differ only inside f-strings,
    which are kept. A file ``tokenize`` refuses is taken whole."""
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        return source
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.ENCODING}
    significant = [t for t in tokens if t.type not in skip]
    starts = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    drop = [t for t in tokens if t.type == tokenize.COMMENT]
    for i, tok in enumerate(significant):
        if tok.type != tokenize.STRING or "f" in tok.string.split(tok.string[-1])[0].lower():
            continue
        before = significant[i - 1].type if i else tokenize.NEWLINE
        after = significant[i + 1].type if i + 1 < len(significant) else tokenize.ENDMARKER
        if before in starts and after in (tokenize.NEWLINE, tokenize.ENDMARKER):
            drop.append(tok)
    lines = source.decode("utf-8").splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    text = "".join(lines)
    # a token's end from its length: Python 3.12's tokenizer misplaces the end of a multi-line string
    # that follows a non-ASCII character
    cuts = sorted((start := offsets[t.start[0] - 1] + t.start[1], start + len(t.string)) for t in drop)
    kept, at = [], 0
    for begin, end in cuts:
        kept.append(text[at:begin])
        at = max(at, end)
    kept.append(text[at:])
    code = "".join(kept).splitlines()
    return "\n".join(line.rstrip() for line in code if line.strip()).encode()


@functools.cache
def _file_hash(path: Path) -> str:
    return _digest(path.read_bytes(), path.suffix == ".py")


@functools.cache
def _digest(data: bytes, python: bool) -> str:
    """The SHA-256 of a file's code (:func:`code_text`) or data, by its content: tokenized once."""
    return hashlib.sha256(code_text(data) if python else data).hexdigest()


def closure_files(module: str, parents: bool = True) -> dict[str, str]:
    """Each file of :func:`closure` (relative to the source root) → the SHA-256 (first 12 digits) of
    its code (:func:`code_text`) or data; the :data:`UNKEYED` files left out."""
    root = _source_root()
    files = {str(p.relative_to(root)): p for p in closure(module, parents)}
    return {rel: _file_hash(p)[:12] for rel, p in files.items() if not rel.startswith(UNKEYED)}


@functools.cache
def closure_version(module: str) -> str:
    """A hash of the files ``module`` can reach (:func:`closure`): the code part of a step's key."""
    h = hashlib.sha256()
    for rel, digest in closure_files(module).items():
        h.update(f"{rel}\0{digest}\0".encode())
    return h.hexdigest()[:12]


def contract_module(contract: str) -> str:
    """The module of a data contract (``sft.v1`` → ``schemas.sft``: one module per contract)."""
    module = f"schemas.{contract.split('.')[0]}"
    if _module_file(module) is None:
        raise ValueError(f"no module {module} for the data contract {contract!r}")
    return module


@functools.cache
def step_files(module: str, contracts: tuple[str, ...]) -> dict[str, str]:
    """The files a step's code version hashes: the import closure of its build ``module`` within
    ``coa`` and the closure of each data contract it reads or writes (``schemas`` is reached through
    its package, which imports every contract: a step's own contracts are named, not that hub)."""
    files = {f: h for f, h in closure_files(module).items() if not f.startswith("schemas/")}
    for contract in contracts:
        files.update(closure_files(contract_module(contract), parents=False))
    return dict(sorted(files.items()))


def files_version(files: dict[str, str]) -> str:
    """A hash of ``files`` (path → digest, as :func:`step_files` gives them)."""
    h = hashlib.sha256()
    for rel, digest in sorted(files.items()):
        h.update(f"{rel}\0{digest}\0".encode())
    return h.hexdigest()[:12]
