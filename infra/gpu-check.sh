#!/usr/bin/env bash
# The GPU check of a lent H100/H200 (or any one-GPU CUDA machine): ONE script, ~8 minutes by default,
# every figure written to files under $OUT (the device tool's folder; /tmp/gpu-check elsewhere):
#   env         the GPU, versions; the project's own wheel and the carried dependency wheels installed
#               with `pip install --no-index --no-deps` (no forged metadata)       -> $OUT/env.txt
#   tests       the CUDA-marked tests (SFT bf16 + accelerate configs, packed flex attention, RL, the
#               batchers on CUDA)                                                   -> $OUT/tests.txt
#   sft         Qwen2.5-0.5B shape: our SFT stage beside bare TRL SFTTrainer (same rows, packing,
#               bf16, Liger where it runs): tokens/s, MFU, peak memory, ours/TRL   -> $OUT/sft.json
#   sft-1.5b    the same on the Qwen2.5-1.5B shape                                 -> $OUT/sft-1.5b.json
#   sft-sweep   sft, and ours at micro-batches 8 and 16 (tokens/s, memory; out of memory says so)
#                                                                                   -> $OUT/sft-sweep.json
#   rl          0.5B shape: rollout tokens/s of our batcher, transformers' continuous batching and
#               plain generate on the same requests; one RL step's generation/tools/training split
#                                                                                   -> $OUT/rl.json
#   profile     the GPU demo's student (configs/demo-gpu.yaml): SFT s/step, the plan's SFT minutes
#                                                                                   -> $OUT/profile.json
#   profile-rl  the same student's rollouts and RL step                            -> $OUT/profile-rl.json
#   demo        configs/demo-gpu.yaml end to end (infra/run_plan.py, no Prefect) on the store built
#               on the CPU (gpu-prepare.sh), shrunk by DEMO_OVERRIDES to DEMO_TIMEOUT s (a rerun
#               resumes); its table and each step's wall time  -> $OUT/demo-gpu.json, $OUT/demo-gpu.log
# Each part's wall time and exit status go to $OUT/parts.tsv. Default parts: sft rl demo (~8 min:
# bounds 200 + 200 + 150 s and the install, under the device tool's 600 s a call). Name parts to run
# others, e.g.: bash infra/gpu-check.sh tests sft-1.5b
#
# Dry run (no GPU: every part but the CUDA work, tiny shapes, the same commands and files):
#   GPU_CHECK_DRY_RUN=1 PY=.venv/bin/python bash infra/gpu-check.sh [PART ...]   (or --dry-run first)
# tests/infra/test_gpu_check_dry_run.py runs it.
#
# Here (with PyPI):      bash infra/gpu-prepare.sh
# There (device tool):   run(command="bash infra/gpu-check.sh [PART ...]", carry=[".whl", ".gpu"], timeout_s=600)
# For `demo` (it curates, and its code tool runs in bwrap), a call just before, on the same warm machine:
#                        run(command="bash infra/gpu-check.sh extra", carry=[".gpu-extra"])
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=${GPU_CHECK_DRY_RUN:-0}
if [ "${1:-}" = --dry-run ]; then DRY=1; shift; fi
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-check}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check-work}  # models and checkpoints (GBs) stay here; reports go to $OUT
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform linux_x86_64)
install_extra() {  # polars (curation) and bwrap (the code tool's sandbox): too big to travel beside .whl
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-extra \
    .gpu-extra/*.whl && install -m 755 .gpu-extra/bwrap /usr/local/bin/bwrap
}
if [ "${1:-}" = extra ]; then
  [ -d .gpu-extra ] || { echo "error: .gpu-extra/ missing: run \`bash infra/gpu-prepare.sh\` here, carry it" >&2; exit 2; }
  install_extra && echo "extra: polars in /tmp/site-extra, bwrap in /usr/local/bin"; exit
fi

SFT=.gpu/sft.parquet RL=.gpu/rl.parquet STORE=.gpu/store
if [ "$DRY" = 1 ]; then
  echo "dry run: every part's CPU side, tiny shapes; no CUDA work (figures from a CPU mean nothing)"
  if [ ! -f "$SFT" ]; then  # no carried data here: a few rows the tests use
    SFT=$WORK/dry/sft.parquet RL=$WORK/dry/rl.parquet
    mkdir -p "$WORK/dry"
    "$PY" - "$SFT" "$RL" <<'PY' || exit 3
import sys

import pyarrow.parquet as pq

from tests.rl.helpers import prompts_table
from tests.train.rows import arith_rows

pq.write_table(arith_rows(24, seed=0), sys.argv[1])
pq.write_table(prompts_table(2), sys.argv[2])
PY
  fi
else
  [ -d .whl ] && [ -f .gpu/sft.parquet ] || {
    echo "error: .whl/ or .gpu/ missing: run \`bash infra/gpu-prepare.sh\` here and carry both" >&2; exit 2; }
fi

step "env: environment"
{
if [ "$DRY" = 1 ]; then
  # what the device would install: the carried wheels (or, with none here, the project's own wheel built
  # now), accepted by pip for CPython 3.12 x86-64 Linux without an index
  wheels=(.whl/*.whl)
  if [ ! -e "${wheels[0]}" ]; then
    rm -rf "$WORK/dry/whl" && mkdir -p "$WORK/dry/whl"
    "$PY" -m pip wheel -q --no-deps --no-build-isolation . -w "$WORK/dry/whl" >/dev/null && rm -rf build || exit 3
    wheels=("$WORK"/dry/whl/*.whl)
  fi
  "$PY" -m pip install -q --dry-run --ignore-installed --no-index --no-deps --python-version 3.12 \
    --implementation cp --only-binary=:all: "${PLATFORMS[@]}" --target "$WORK/dry/site" "${wheels[@]}" \
    || { echo "error: pip would not install the wheels on Python 3.12" >&2; exit 3; }
  echo "wheels: ${#wheels[@]} would install on CPython 3.12 with --no-index: ${wheels[*]##*/}"
  export PYTHONPATH=$PWD
else
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "error: installing the carried wheels failed" >&2; exit 3; }
  # the tree first: the store's keys hold a hash of the source the CPU side built them with (coa/version.py);
  # the wheel gives the package's metadata (its version) and the console script
  export PYTHONPATH=$PWD:/tmp/site
  [ -d .gpu-extra ] && install_extra
  [ -d /tmp/site-extra ] && export PYTHONPATH=$PYTHONPATH:/tmp/site-extra
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
"$PY" - "$DRY" <<'PY' || exit 3
import importlib, importlib.metadata, importlib.util, pathlib, sys
import torch, transformers, trl, accelerate, pyarrow, datasets, pydantic
dry = sys.argv[1] == "1"
print(f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda} "
      f"transformers {transformers.__version__} trl {trl.__version__} accelerate {accelerate.__version__} "
      f"pyarrow {pyarrow.__version__} datasets {datasets.__version__}")
version = importlib.metadata.version("coa-pipeline")
carried = pathlib.Path(".gpu/package-version")
if carried.exists() and carried.read_text().strip() != version:
    print(f"warning: coa-pipeline {version} installed, the store was built with {carried.read_text().strip()}")
print(f"coa-pipeline {version}")
assert dry or torch.cuda.is_available(), "torch sees no CUDA device"
for module in ("coa.train.sft", "coa.train.kernels", "coa.rl.grpo", "coa.rollout.policies.hf_batched"):
    importlib.import_module(module)
from coa.train.kernels import liger_unavailable
print("liger:", liger_unavailable(torch.cuda.is_available()) or "available")
print("imports: ok on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (dry run)")
# what only the demo's steps import (curation's gate, the math scorer, the code tool's sandbox): said
# now, not minutes into the demo (the 2026-11-28 H200 run stopped at curate.r2 after 335 s)
missing = [m for m in ("great_expectations", "math_verify", "bm25s", "polars") if importlib.util.find_spec(m) is None]
if missing:
    print(f"warning: the part 'demo' needs {', '.join(missing)}: rerun infra/gpu-prepare.sh here "
          "(polars: run the part 'extra' first on the same warm machine)")
PY
} 2>&1 | tee "$OUT/env.txt"
[ "${PIPESTATUS[0]}" = 0 ] || exit 3

quick=(); [ "$DRY" = 1 ] && quick=(--quick)
# time bounds: a dry run on a busy 2-core CPU is slower than the GPU run it rehearses (GPU_CHECK_TIMEOUT_SCALE)
SCALE=${GPU_CHECK_TIMEOUT_SCALE:-1}; [ "$DRY" = 1 ] && SCALE=${GPU_CHECK_TIMEOUT_SCALE:-5}
bound() { echo $(($1 * SCALE)); }
backend=(rollout.backend=hf_batched)  # rl.rollout.backend (coa/rl/config.py)
# a shrunk demo for the default ~8 minutes (DEMO_OVERRIDES= runs the profile as it is)
DEMO_OVERRIDES=${DEMO_OVERRIDES-student.tiny.pretrain_steps=1000 sft.max_steps=600 sampling.limit_per_family=25 round_sft.max_steps=150 rl.time_budget_s=30}
part() {
  case "$1" in
    tests) step "tests: CUDA-marked tests"
      files=(tests/train/test_sft.py tests/train/test_packed_loss.py tests/rl/test_grpo.py tests/serve/test_engine.py
             tests/rollout/test_hf_batched.py)
      if [ "$DRY" = 1 ]; then collect=(--collect-only); else collect=(); fi
      timeout $(bound 150) "$PY" -m pytest -q -p no:cacheprovider -m cuda "${collect[@]}" "${files[@]}" 2>&1 | tail -15 \
        | tee "$OUT/tests.txt" ;;
    sft|sft-1.5b|sft-sweep) step "$1: our SFT vs bare TRL SFTTrainer (sft-1.5b: the 1.5B shape; sft-sweep: and ours at micro-batches 8, 16)"
      shape=0.5b; [ "$1" = sft-1.5b ] && shape=1.5b
      sweep=(); [ "$1" = sft-sweep ] && sweep=(--batch-sizes "$([ "$DRY" = 1 ] && echo 1 || echo 8,16)")
      timeout $(bound "$([ "$1" = sft-sweep ] && echo 330 || echo 200)") "$PY" bench/bench_sft_gpu.py "${quick[@]}" \
        --data "$SFT" --out "$WORK/bench" --shapes "$shape" --steps 30 "${sweep[@]}" --json "$OUT/$1.json" 2>&1 | tail -60 ;;
    rl) step "rl: rollouts (ours / transformers CB / generate) and one RL step (Qwen2.5-0.5B shape)"
      timeout $(bound 200) "$PY" bench/bench_rl_gpu.py "${quick[@]}" --prompts "$RL" --sft-data "$SFT" --out "$WORK/bench" \
        --n-prompts 8 --group 8 --max-new-tokens 384 --steps 2 --rl-timeout $(bound 110) --json "$OUT/rl.json" "${backend[@]}" 2>&1 | tail -60 ;;
    profile) step "profile: the GPU demo's student (configs/demo-gpu.yaml): SFT steps/s and the plan's minutes"
      timeout $(bound 120) "$PY" bench/bench_sft_gpu.py "${quick[@]}" --data "$SFT" --out "$WORK/demo-gpu" \
        --profile configs/demo-gpu.yaml --steps 300 --json "$OUT/profile.json" 2>&1 | tail -40 ;;
    profile-rl) step "profile-rl: rollouts and RL of the GPU demo's (random-init) student"
      timeout $(bound 150) "$PY" bench/bench_rl_gpu.py "${quick[@]}" --prompts "$RL" --sft-data "$SFT" \
        --out "$WORK/demo-gpu-rl" --profile configs/demo-gpu.yaml --steps 2 --rl-timeout $(bound 80) --json "$OUT/profile-rl.json" \
        "${backend[@]}" 2>&1 | tail -40 ;;
    demo) step "demo: configs/demo-gpu.yaml end to end ${DEMO_OVERRIDES:-}"
      store=$WORK/store
      if [ "$DRY" = 1 ]; then  # the plan and what the carried store (if any) would reuse; nothing run
        root=$STORE; [ -d "$root" ] || { root=$WORK/dry/store; mkdir -p "$root"; }
        # shellcheck disable=SC2086
        COA_STORAGE_ROOT=$root timeout $(bound 120) "$PY" infra/run_plan.py -c configs/demo-gpu.yaml ${DEMO_OVERRIDES:-} \
          --dry-run 2>&1 | tee "$OUT/demo-gpu.log" | tail -40
        return "${PIPESTATUS[0]}"
      fi
      [ -d /tmp/site-extra ] || echo "warning: polars is not installed: run the part 'extra' first" >&2
      [ -d "$store" ] || cp -r "$STORE" "$store"
      # the carried store must hold the steps up to convert for this code (their keys hold its hash):
      # else the run stops at once instead of collecting on device time (DEMO_REBUILD=1: build them)
      reuse=(--expect-reused convert); [ "${DEMO_REBUILD:-0}" = 1 ] && reuse=()
      # shellcheck disable=SC2086
      COA_STORAGE_ROOT=$store timeout -k 20 "${DEMO_TIMEOUT:-150}" "$PY" infra/run_plan.py \
        -c configs/demo-gpu.yaml ${DEMO_OVERRIDES:-} "${reuse[@]}" --json "$OUT/demo-gpu.json" 2>&1 \
        | grep -v -E 'it/s\]|examples/s\]|s/it\]' | tee "$OUT/demo-gpu.log" | tail -80 ;;
    *) echo "error: unknown part '$1' (env tests sft sft-1.5b sft-sweep rl profile profile-rl demo)" >&2; return 2 ;;
  esac
}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(sft rl demo)
printf 'part\twall_s\tstatus\n' >"$OUT/parts.tsv"
failed=0
for name in "${parts[@]}"; do
  [ "$name" = env ] && continue
  began=$(date +%s)
  part "$name"; status=$?
  printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - began))" "$status" | tee -a "$OUT/parts.tsv"
  [ "$status" = 0 ] || failed=1
done
step "done"
column -t "$OUT/parts.tsv" 2>/dev/null || cat "$OUT/parts.tsv"
exit "$failed"
