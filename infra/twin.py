"""The CPU twin of the lent GPU machine: run a device command here, as the device would run it.

A GPU is lent rarely, for ~15 minutes; a check that dies at ``import coa`` or is refused for size wastes
it. The twin reproduces what the device tool does to a command, on this CPU machine:

* **what travels**: a copy of the tree holding only tracked files, untracked files git does not ignore,
  and the ``carry`` paths, measured as the device measures it (:func:`travelling`): over 64 MiB the call
  is refused there, and here too, naming the largest parts to leave out;
* **the image's Python**: a virtual environment (``.venv-twin``) holding only the image's packages that
  the project's dependencies reach (``infra/device/image.txt``), at the image's versions where this
  machine can install them (torch: the CPU build 2.13.0 on disk, not the image's CUDA 2.11.0; numpy:
  no 2.5.2 for Python 3.11); this machine's Python 3.11, not the image's 3.12 (torch has no CPU wheel
  here for 3.12), so the carried wheels are prepared for 3.11 (``GPU_PYTHON=3.11``): the same
  versions, another ABI tag. No project installed, no ``PYTHONPATH``, a bare environment;
* **no network**: the command runs under ``unshare -n`` (a network namespace with no interface up);
* **``$OUT`` read back under the device's rules** (:func:`returned`): at most 8 files, 16 MiB each and
  64 MiB together, at most 2 folders down, names of letters, digits, ``.``, ``_`` and ``-``.

    .venv/bin/python infra/twin.py [--carry .whl .gpu] [--json F] [-- COMMAND]
    # COMMAND's default: bash infra/gpu-check.sh

With no ``--carry`` it prepares its own (``infra/gpu-prepare.sh``: wheels for 3.11, the demo's data)
under ``.twin/``. Exit status: the command's, or 5 when what travels is too big or ``$OUT`` would not
come back whole.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "infra" / "device" / "image.txt"
MiB = 1 << 20
TRAVEL_LIMIT = 64 * MiB  # the working tree and the carried paths, together (the device tool's README)
OUT_FILES, OUT_FILE_BYTES, OUT_BYTES, OUT_DEPTH = 8, 16 * MiB, 64 * MiB, 2
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# Where this machine cannot install the image's version: the version taken instead, and why.
SUBSTITUTES = {
    "torch": ("2.13.0", "the CPU build on this machine's disk (the image's 2.11.0 is a CUDA build of GBs)"),
    "numpy": (None, "2.5.2 has no build for Python 3.11: the project's pinned version"),
    "triton": ("", "GPU kernels' compiler: nothing to run on a CPU (Liger's kernels fall back)"),
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- what travels -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Travel:
    """The files a device call sends, by the device's rules, and their size."""

    files: dict[str, Path]
    """Path in the tree that travels -> the file here."""
    bytes_by_part: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.bytes_by_part.values())

    def too_big(self) -> str | None:
        """Why the device would refuse the call, naming the largest parts (None: it fits)."""
        if self.total <= TRAVEL_LIMIT:
            return None
        biggest = sorted(self.bytes_by_part.items(), key=lambda kv: -kv[1])[:5]
        parts = ", ".join(f"{name} {size / MiB:.1f} MiB" for name, size in biggest)
        return (
            f"what travels is {self.total / MiB:.1f} MiB, over the device's {TRAVEL_LIMIT // MiB} MiB: "
            f"{parts}. "
            "Leave out what the call does not need: ignore it in .gitignore (a build folder, a venv) or stop "
            "carrying it"
        )


Carry = tuple[Path, str]
"""A carried path: where it is here, and the path under the tree it travels to (the device keeps the
path; the twin may carry its own build of it, e.g. wheels for this machine's Python, to the same place)."""


def carried(spec: str) -> Carry:
    """``SRC`` or ``SRC:DEST`` (``DEST`` relative to the tree; default: ``SRC``'s own path)."""
    src, _, dest = spec.partition(":")
    return Path(src), dest or src


def travelling(repo: Path, carry: list[Carry]) -> Travel:
    """Tracked files, untracked files git does not ignore, and the carried paths (``{tree path: source}``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    files = {f: repo / f for f in listed if f and (repo / f).is_file() and not (repo / f).is_symlink()}
    parts: dict[str, int] = {}
    for f, path in files.items():
        top = f.split("/")[0] if "/" in f else "(top-level files)"
        parts[top] = parts.get(top, 0) + path.stat().st_size
    for src, dest in carry:
        full = src if src.is_absolute() else repo / src
        if not full.exists():
            raise SystemExit(f"error: carry path {src} does not exist (run bash infra/gpu-prepare.sh)")
        found = (
            [full] if full.is_file() else [p for p in full.rglob("*") if p.is_file() and not p.is_symlink()]
        )
        for p in found:
            files[str(Path(dest) / p.relative_to(full)) if p != full else dest] = p
        parts[f"{dest} (carried)"] = sum(p.stat().st_size for p in found)
    return Travel(dict(sorted(files.items())), parts)


def copy_travelling(travel: Travel, dest: Path) -> None:
    for rel, source in travel.files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


# -- what comes back ----------------------------------------------------------------------------------


def returned(out: Path) -> tuple[list[str], list[str]]:
    """The files under ``out`` the device would return, and the ones it would leave out (with why)."""
    kept: list[str] = []
    left: list[str] = []
    total = 0
    for path in sorted(p for p in out.rglob("*") if not p.is_dir()):
        rel = path.relative_to(out)
        why = None
        if path.is_symlink() or not path.is_file():
            why = "not a plain file"
        elif len(rel.parts) - 1 > OUT_DEPTH:
            why = f"more than {OUT_DEPTH} folders down"
        elif not all(OUT_NAME.match(part) for part in rel.parts):
            why = "a name with characters other than letters, digits, '.', '_', '-'"
        elif path.stat().st_size > OUT_FILE_BYTES:
            why = f"over {OUT_FILE_BYTES // MiB} MiB"
        elif len(kept) >= OUT_FILES:
            why = f"over {OUT_FILES} files"
        elif total + path.stat().st_size > OUT_BYTES:
            why = f"over {OUT_BYTES // MiB} MiB together"
        if why:
            left.append(f"{rel} ({why})")
        else:
            kept.append(str(rel))
            total += path.stat().st_size
    return kept, left


# -- the image's Python -------------------------------------------------------------------------------


def image_packages() -> dict[str, str | None]:
    """The image's packages (normalized name -> version, None where not read), from ``image.txt``."""
    out: dict[str, str | None] = {}
    for line in IMAGE.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[_norm(name)] = version or None
    return out


def project_closure() -> dict[str, str]:
    """The project's runtime dependencies, direct and indirect (name -> version installed here)."""
    dists = {_norm(d.metadata["Name"]): d for d in metadata.distributions()}
    seen: dict[str, str] = {}
    todo = ["coa-pipeline"]
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen[name] = dists[name].version
        for line in dists[name].requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_norm(req.name))
    seen.pop("coa-pipeline", None)
    return seen


def twin_requirements() -> tuple[list[str], list[str]]:
    """What the twin's environment installs (``name==version``) and how it differs from the image."""
    image, closure = image_packages(), project_closure()
    reqs: list[str] = []
    notes: list[str] = []
    for name in sorted(set(image) & set(closure)):
        version = image[name] or closure[name]
        if name in SUBSTITUTES:
            sub, why = SUBSTITUTES[name]
            if sub == "":
                notes.append(f"{name}: left out ({why})")
                continue
            version = sub or closure[name]
            notes.append(f"{name} {version} instead of {image[name]} ({why})")
        elif image[name] is None:
            notes.append(f"{name} {version}: the image's version not read, the project's taken")
        reqs.append(f"{name}=={version}")
    return reqs, notes


def ensure_venv(path: Path) -> Path:
    """``.venv-twin``'s Python, created (rebuilt when its requirements change): :func:`twin_requirements`."""
    reqs, notes = twin_requirements()
    stamp = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:16]
    python = path / "bin" / "python"
    if (path / ".twin-stamp").exists() and (path / ".twin-stamp").read_text() == stamp and python.exists():
        return python
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    print(
        f"twin: building {path} ({len(reqs)} packages of the image), Python {sys.version.split()[0]}",
        flush=True,
    )
    for note in notes:
        print(f"twin: {note}", flush=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    rest = [req for req in reqs if not _link_installed(req, site)]
    print(f"twin: {len(reqs) - len(rest)} packages linked from this environment (same version), "
          f"{len(rest)} installed by pip", flush=True)  # fmt: skip
    if rest:
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        subprocess.run([*pip, *rest], check=True)
    (path / ".twin-stamp").write_text(stamp)
    return python


def _link_installed(req: str, site: Path) -> bool:
    """Install ``name==version`` into ``site`` by hard-linking the files this environment's copy of that
    very version holds (its RECORD: what pip unpacked from the same wheel), when it has that version;
    False (nothing written) otherwise. Files outside site-packages (console scripts) are left out: the
    check runs ``python -m``. Linking instead of unpacking the wheels again saves ~1-2 minutes of CPU."""
    name, _, version = req.partition("==")
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    files = dist.files or []
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if dist.version != version or not files or direct.get("dir_info", {}).get("editable"):
        return False
    here = Path(str(dist.locate_file(""))).resolve()
    planned = []
    for f in files:
        src = Path(str(dist.locate_file(f))).resolve()
        if not src.is_relative_to(here) or not src.is_file():
            continue  # outside site-packages (bin/), or listed but absent (a .pyc not written)
        planned.append((src, site / src.relative_to(here)))
    for src, dst in planned:
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:  # another filesystem: copy
            shutil.copy2(src, dst)
    return True


# -- the run ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TwinRun:
    status: int
    wall_s: float
    travel_mib: float
    travel_parts_mib: dict[str, float]
    returned: list[str]
    left_out: list[str]
    output_tail: str
    out: Path


def network_cut() -> list[str]:
    """The prefix that runs a command with no network (``unshare -n``), or why it cannot here."""
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(
            f"error: `unshare -n` fails here ({probe.stderr.strip()}): the twin cuts the network with a "
            "network namespace, which needs root or unprivileged user namespaces (unshare -rn)"
        )
    return ["unshare", "-n"]


def run(
    command: str,
    carry: list[Carry],
    repo: Path = ROOT,
    venv: Path = ROOT / ".venv-twin",
    work: Path | None = None,
    timeout_s: float = 1800,
    env: dict[str, str] | None = None,
) -> TwinRun:
    """``command`` on a copy of what travels, with the image's Python, no network; ``$OUT`` checked."""
    travel = travelling(repo, carry)
    if why := travel.too_big():
        raise SystemExit(f"error: {why}")
    python = ensure_venv(venv)
    work = Path(tempfile.mkdtemp(prefix="twin-")) if work is None else work
    tree, out, tmp = work / "tree", work / "out", work / "tmp"
    for folder in (tree, out, tmp):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    copy_travelling(travel, tree)
    base = {  # a bare environment: the image's python3 first on PATH, no PYTHONPATH, no project installed
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "OUT": str(out),
        "GPU_CHECK_CPU": "1",
        "GPU_CHECK_SITE": str(tmp / "site"),
        "GPU_CHECK_WORK": str(tmp / "work"),
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    began = time.monotonic()
    try:
        proc = subprocess.run(
            [*network_cut(), "bash", "-c", command], cwd=tree, env=base, capture_output=True, text=True,
            timeout=timeout_s,
        )  # fmt: skip
        status, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        status = 124
        output = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    kept, left = returned(out)
    return TwinRun(
        status=status,
        wall_s=round(time.monotonic() - began, 1),
        travel_mib=round(travel.total / MiB, 2),
        travel_parts_mib={k: round(v / MiB, 2) for k, v in travel.bytes_by_part.items()},
        returned=kept,
        left_out=left,
        output_tail=output[-12_000:],
        out=out,
    )


def prepare(dest: Path, python_version: str, parts: str = "wheels data") -> None:
    """``infra/gpu-prepare.sh`` into ``dest`` (wheels for ``python_version``)."""
    env = {
        **os.environ,
        "GPU_PREPARE_DEST": str(dest),
        "GPU_PYTHON": python_version,
        "GPU_PREPARE_PARTS": parts,
    }
    subprocess.run(["bash", "infra/gpu-prepare.sh"], cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--carry",
        nargs="*",
        type=carried,
        help="carried paths, SRC[:DEST] (default: prepare .twin/, carry it)",
    )
    parser.add_argument("--json", type=Path, help="write the run's record here")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- COMMAND (default: bash infra/gpu-check.sh)"
    )
    args = parser.parse_args(argv)
    command = (
        " ".join(args.command[1:] if args.command[:1] == ["--"] else args.command)
        or "bash infra/gpu-check.sh"
    )
    carry = args.carry
    if carry is None:  # the twin's own carry, ignored by git (.twin/), for this machine's Python
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        prepare(ROOT / ".twin", py)
        carry = [(Path(".twin/.whl"), ".whl"), (Path(".twin/.gpu"), ".gpu")]
    result = run(command, carry, work=args.keep)
    print(result.output_tail)
    print(f"twin: exit {result.status} in {result.wall_s} s; travelled {result.travel_mib} MiB; "
          f"$OUT returns {len(result.returned)} files: {', '.join(result.returned)}")  # fmt: skip
    for item in result.left_out:
        print(f"twin: $OUT would not return {item}")
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(result), indent=1, default=str))
    return result.status or (5 if result.left_out else 0)


if __name__ == "__main__":
    sys.exit(main())
