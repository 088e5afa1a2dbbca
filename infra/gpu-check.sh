#!/usr/bin/env bash
# The GPU check of a lent H100/H200 (or any one-GPU CUDA machine), in under 10 minutes:
#   1. the environment: GPU, versions, the project's imports (wheels from infra/gpu-prepare.sh)
#   2. the CUDA-marked tests (SFT bf16 + accelerate single-GPU / ZeRO-3 configs, RL under accelerate)
#   3. SFT throughput and MFU on the Qwen2.5-0.5B shape (random init): padded vs packed
#   4. one RL run on the same shape with the in-process batched policy: rollout tokens/s and the
#      generation / tools / training split of a step
#   5. the GPU demo's student (configs/demo-gpu.yaml): its SFT steps/s and the minutes its plan's SFT
#      and round-2 SFT take, then one RL run of that student (rollout tokens/s of the demo's size)
#   6. demo: the GPU demo's plan end to end (infra/run_plan.py: the plan's steps in-process, no Prefect
#      on the image) on the data gpu-prepare.sh built, each step's wall time and the training report;
#      DEMO_OVERRIDES shrinks it to the device time at hand, DEMO_TIMEOUT bounds it (a rerun resumes);
#      it stops at once (exit 4) when the carried store was built for other code (DEMO_REBUILD=1: go on)
# Parts can be named to run fewer or in another order (device time is scarce): env always runs first.
#   bash infra/gpu-check.sh rl profile-rl tests
# Figures go to $OUT (the device tool's folder) or /tmp/gpu-check; paste them into infra/README.md.
#
# Here (with PyPI):      bash infra/gpu-prepare.sh
# There (device tool):   run(command="bash infra/gpu-check.sh [PART ...]", carry=[".whl", ".gpu"], timeout_s=600)
# For `demo` (it curates, and its code tool runs in bwrap), a call just before, on the same warm machine:
#                        run(command="bash infra/gpu-check.sh extra", carry=[".gpu-extra"])
# then, e.g., DEMO_OVERRIDES="sft.max_steps=400" DEMO_TIMEOUT=300 bash infra/gpu-check.sh demo
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
WORK=/tmp/gpu-check-work  # models and checkpoints (GBs) stay here; only the JSON reports go to $OUT
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
install_extra() {  # polars (curation) and bwrap (the code tool's sandbox): too big to travel beside .whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-extra \
    .gpu-extra/*.whl && install -m 755 .gpu-extra/bwrap /usr/local/bin/bwrap
}
if [ "${1:-}" = extra ]; then
  [ -d .gpu-extra ] || { echo "error: .gpu-extra/ missing: run \`bash infra/gpu-prepare.sh\` here, carry it" >&2; exit 2; }
  install_extra && echo "extra: polars in /tmp/site-extra, bwrap in /usr/local/bin"; exit
fi
[ -d .whl ] && [ -f .gpu/sft.parquet ] || {
  echo "error: .whl/ or .gpu/ missing: run \`bash infra/gpu-prepare.sh\` here and carry both" >&2; exit 2; }

step "env: environment"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "error: installing the carried wheels failed" >&2; exit 3; }
export PYTHONPATH=/tmp/site:$PWD
[ -d .gpu-extra ] && install_extra
[ -d /tmp/site-extra ] && export PYTHONPATH=$PYTHONPATH:/tmp/site-extra
if [ -f .gpu/package-version ]; then  # the store's keys hold the code version (coa/version.py): the
  # package's version as installed where gpu-prepare.sh built the data, and a hash of the source
  version=$(cat .gpu/package-version)
  mkdir -p "/tmp/site/coa_pipeline-$version.dist-info"
  printf 'Metadata-Version: 2.1\nName: coa-pipeline\nVersion: %s\n' "$version" \
    >"/tmp/site/coa_pipeline-$version.dist-info/METADATA"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 - <<'PY' || exit 3
import importlib, importlib.util, sys
import torch, transformers, trl, accelerate, pyarrow, datasets, pydantic
print(f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda} "
      f"transformers {transformers.__version__} trl {trl.__version__} accelerate {accelerate.__version__} "
      f"pyarrow {pyarrow.__version__} datasets {datasets.__version__}")
assert torch.cuda.is_available(), "torch sees no CUDA device"
for module in ("coa.train.sft", "coa.rl.grpo", "coa.rollout.policies.hf_batched"):
    importlib.import_module(module)
print("imports: ok on", torch.cuda.get_device_name(0))
# what only the demo's steps import (curation's gate, the math scorer, the code tool's sandbox): said
# now, not minutes into the demo (the 2026-11-28 H200 run stopped at curate.r2 after 335 s)
missing = [m for m in ("great_expectations", "math_verify", "bm25s", "polars") if importlib.util.find_spec(m) is None]
if missing:
    print(f"warning: the part 'demo' needs {', '.join(missing)}: rerun infra/gpu-prepare.sh here "
          "(polars: run the part 'extra' first on the same warm machine)")
PY

backend=(rollout.backend=hf_batched)  # rl.rollout.backend (coa/rl/config.py)
part() {
  case "$1" in
    tests) step "tests: CUDA-marked tests"
      timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests/train/test_sft.py tests/rl/test_grpo.py tests/serve/test_engine.py tests/rollout/test_hf_batched.py 2>&1 | tail -15 ;;
    sft) step "sft: SFT throughput + MFU (Qwen2.5-0.5B shape)"
      timeout 200 python3 bench/bench_sft_gpu.py --data .gpu/sft.parquet --out "$WORK" --steps 30 2>&1 | tail -45 ;;
    rl) step "rl: RL run, hf_batched (Qwen2.5-0.5B shape)"
      timeout 180 python3 bench/bench_rl_gpu.py --prompts .gpu/rl.parquet --sft-data .gpu/sft.parquet \
        --out "$WORK" --steps 3 "${backend[@]}" 2>&1 | tail -30 ;;
    profile) step "profile: the GPU demo's student (configs/demo-gpu.yaml): SFT steps/s and the plan's minutes"
      timeout 120 python3 bench/bench_sft_gpu.py --data .gpu/sft.parquet --out "$WORK/demo-gpu" \
        --profile configs/demo-gpu.yaml --steps 300 2>&1 | tail -40 ;;
    profile-rl) step "profile-rl: RL of the GPU demo's (random-init) student, hf_batched"
      timeout 120 python3 bench/bench_rl_gpu.py --prompts .gpu/rl.parquet --sft-data .gpu/sft.parquet \
        --out "$WORK/demo-gpu-rl" --profile configs/demo-gpu.yaml --steps 3 "${backend[@]}" 2>&1 | tail -30 ;;
    demo) step "demo: configs/demo-gpu.yaml end to end ${DEMO_OVERRIDES:-}"
      [ -d /tmp/site-extra ] || echo "warning: polars is not installed: run the part 'extra' first" >&2
      [ -d "$WORK/store" ] || cp -r .gpu/store "$WORK/store"
      # the carried store must hold the steps up to convert for this code (their keys hold its hash):
      # else the run stops at once instead of collecting on device time (DEMO_REBUILD=1: build them)
      reuse=(--expect-reused convert); [ "${DEMO_REBUILD:-0}" = 1 ] && reuse=()
      # shellcheck disable=SC2086
      COA_STORAGE_ROOT=$WORK/store timeout -k 20 "${DEMO_TIMEOUT:-900}" python3 infra/run_plan.py \
        -c configs/demo-gpu.yaml ${DEMO_OVERRIDES:-} "${reuse[@]}" --json "$OUT/demo-gpu.json" 2>&1 \
        | grep -v -E 'it/s\]|examples/s\]|s/it\]' | tee "$OUT/demo-gpu.log" | tail -80 ;;
    *) echo "error: unknown part '$1' (env tests sft rl profile profile-rl demo)" >&2; return 2 ;;
  esac
}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests sft rl profile profile-rl)
for name in "${parts[@]}"; do
  [ "$name" = env ] && continue
  part "$name"
  find "$WORK" -maxdepth 2 -name 'bench_*.json' -exec sh -c 'cp -f "$1" "$OUT/$(basename "$(dirname "$1")")-$(basename "$1")"' _ {} \;
done
step "done"
