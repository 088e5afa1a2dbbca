#!/usr/bin/env bash
# The GPU check of a lent H100/H200 (or any one-GPU CUDA machine): ONE call does everything, in order of
# value, inside GPU_CHECK_BUDGET_S (480 s) of wall time, every figure written under $OUT as it is measured:
#   env         the carried wheels installed (`pip install --no-index --no-deps`), bwrap put on PATH, the GPU
#               and versions, then every module each part will reach IMPORTED (infra/reach.py)   -> env.txt
#   sft         Qwen2.5-0.5B shape: our SFT stage beside bare TRL SFTTrainer (same rows, packing, bf16,
#               Liger where it runs, the plain path where it fails): tokens/s, MFU, memory   -> sft.json, sft.log
#   rl          0.5B shape: rollout tokens/s of our batcher, transformers' continuous batching and plain
#               generate on the same requests; one RL step's generation/tools/training split -> rl.json, rl.log
#   demo        configs/demo-gpu.yaml with one round (rounds=1: SFT, evaluations, RL; no curation on the
#               GPU side, so neither polars nor great-expectations travel) on the store built on the CPU
#               (gpu-prepare.sh: every step that runs no model), the plain path (no Liger), with THE TIME
#               LEFT; its table and each step's wall time                       -> demo-gpu.json, demo-gpu.log
#   parts.tsv   each part's wall time, exit status and the budget left after it
# That is 8 files, the most the device returns. Optional parts, for a session with device time left (a
# second call): sft-1.5b, sft-sweep, tests, profile, profile-rl (e.g. `bash infra/gpu-check.sh tests sft-1.5b`).
#
# Prepare here (PyPI, the project's .venv):  bash infra/gpu-prepare.sh
# Run there (the device tool):               run(command="bash infra/gpu-check.sh", carry=[".whl", ".gpu"],
#                                                timeout_s=600)
# Rehearse here, as the device runs it:      .venv/bin/python infra/twin.py   (the CPU twin, tests/infra/test_twin.py)
#
# GPU_CHECK_CPU=1 (the twin sets it): CPU shapes, the same commands and files (tiny models, a few steps).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
CPU=${GPU_CHECK_CPU:-0}
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu-check}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check-work}  # models and checkpoints (GBs) stay here; reports go to $OUT
SITE=${GPU_CHECK_SITE:-/tmp/site}            # where the carried wheels are installed
BUDGET=${GPU_CHECK_BUDGET_S:-480}  # the whole call: with the machine's 3-4 minute start, <= 12 device minutes
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
left() { echo $((T0 + BUDGET - $(date +%s))); }
bound() { local want=$1 rest; rest=$(($(left) - 5)); [ "$want" -lt "$rest" ] && echo "$want" || echo "$rest"; }
step() { echo; echo "=== $* ($(date -u +%H:%M:%S), $(left) s of the budget left)"; }

# ---- the environment, set here at the top level: a variable exported inside `{ …; } | tee` is lost with
# the pipeline's subshell (every later part would then miss coa, trl, pydantic)
[ -d .whl ] && [ -f .gpu/sft.parquet ] && [ -d .gpu/store ] || {
  echo "error: .whl/ or .gpu/ missing: run \`bash infra/gpu-prepare.sh\` here and carry both" >&2; exit 2; }
step "env: the carried wheels, bwrap, versions, every module the parts will reach"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
  >"$OUT/env.txt" 2>&1 || { cat "$OUT/env.txt"; echo "error: installing the carried wheels failed" >&2; exit 3; }
# the tree first: the store's keys hold a hash of the source the CPU side built them with (coa/version.py);
# the wheel gives the package's metadata (its version) and the console script
export PYTHONPATH=$PWD:$SITE
mkdir -p "$SITE/bin" && install -m 755 .gpu/bin/bwrap "$SITE/bin/bwrap" && export PATH=$SITE/bin:$PATH
SFT=.gpu/sft.parquet RL=.gpu/rl.parquet DOCS=.gpu/encyclopedia.parquet STORE=$WORK/store
[ -d "$STORE" ] || cp -r .gpu/store "$STORE"
export COA_STORAGE_ROOT=$STORE

if [ "$CPU" = 1 ]; then
  quick=(--quick)
  # CPU shapes: the demo's student and steps shrunk to seconds; the plan, the store and the steps the same
  DEMO_OVERRIDES=${DEMO_OVERRIDES-rounds=1 sft.liger_kernel=false student.tiny.vocab_size=512 student.tiny.hidden_size=64
student.tiny.num_layers=2 student.tiny.num_heads=2 student.tiny.num_kv_heads=2 student.tiny.intermediate_size=128
student.tiny.pretrain_steps=10 sft.max_steps=6 sft.save_steps=1000 sft.eval_steps=1000 sft.batch_size=2
sft.max_length=512 evaluate.limit_per_family=4 evaluate.max_turns=2 evaluate.max_new_tokens=16
evaluate.max_total_tokens=256 rl.max_steps=1 rl.time_budget_s=null rl.group_size=2 rl.prompts_per_step=2 rl.max_turns=1
rl.max_new_tokens=16 rl.max_total_tokens=256 rl.max_refill_rounds=0}
  BUDGET=${GPU_CHECK_BUDGET_S:-1500} SCALE=3  # a CPU runs the GPU's work slower, whatever the shapes
else
  quick=() SCALE=1
  # one round (no curation on the GPU side), the plain path first (no Liger), sized for the time left
  # (H200 rates, 2026-11-28: pretraining ~25 ms a step + ~29 s, SFT ~35 s + 0.062 s a step, an evaluation
  # 15-18 s): ~40 + 60 + 3 x 17 + ~50 (RL) + ~10 (report) s; cut at its bound, a rerun on the warm machine resumes
  DEMO_OVERRIDES=${DEMO_OVERRIDES-rounds=1 sft.liger_kernel=false student.tiny.pretrain_steps=500 sft.max_steps=400
rl.time_budget_s=20}
fi
DEMO_OVERRIDES=$(echo "$DEMO_OVERRIDES" | tr '\n' ' ')
env_part() {
  if [ "$CPU" = 1 ]; then echo "CPU shapes (GPU_CHECK_CPU=1): no figure here is a GPU's"; else
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi
  echo "python: $PY; site: $SITE; store: $STORE; budget: $BUDGET s"
  "$PY" - "$CPU" <<'PY' || return 3
import importlib.metadata, pathlib, sys
import torch, transformers, trl, accelerate, pyarrow, datasets, pydantic
cpu = sys.argv[1] == "1"
print(f"python {sys.version.split()[0]} torch {torch.__version__} cuda {torch.version.cuda} "
      f"transformers {transformers.__version__} trl {trl.__version__} accelerate {accelerate.__version__} "
      f"pyarrow {pyarrow.__version__} datasets {datasets.__version__}")
version = importlib.metadata.version("coa-pipeline")
carried = pathlib.Path(".gpu/package-version")
if carried.exists() and carried.read_text().strip() != version:
    print(f"warning: coa-pipeline {version} installed, the store was built with {carried.read_text().strip()}")
print(f"coa-pipeline {version}")
assert cpu or torch.cuda.is_available(), "torch sees no CUDA device"
from coa.train.kernels import liger_unavailable
print("liger:", liger_unavailable(torch.cuda.is_available()) or "available")
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU")
PY
  bwrap --ro-bind / / --dev /dev --proc /proc true && echo "bwrap: runs" || { echo "error: bwrap does not run"; return 3; }
  # shellcheck disable=SC2086
  "$PY" infra/reach.py sft rl --demo -c configs/demo-gpu.yaml $DEMO_OVERRIDES || return 3
}
env_part >>"$OUT/env.txt" 2>&1
env_status=$?
cat "$OUT/env.txt"
[ "$env_status" = 0 ] || { echo "error: the environment part failed (above); no part ran" >&2; exit 3; }

backend=(rollout.backend=hf_batched)  # rl.rollout.backend (coa/rl/config.py)
part() {  # NAME BOUND: each part logs to $OUT/NAME.log and writes its record as it measures
  case "$1" in
    tests)
      files=(tests/train/test_sft.py tests/train/test_packed_loss.py tests/rl/test_grpo.py tests/serve/test_engine.py
             tests/rollout/test_hf_batched.py)
      timeout -k 10 "$2" "$PY" -m pytest -q -p no:cacheprovider -m cuda "${files[@]}" ;;
    sft|sft-1.5b|sft-sweep)
      shape=0.5b; [ "$1" = sft-1.5b ] && shape=1.5b
      sweep=(); [ "$1" = sft-sweep ] && sweep=(--batch-sizes "$([ "$CPU" = 1 ] && echo 1 || echo 8,16)")
      timeout -k 10 "$2" "$PY" bench/bench_sft_gpu.py "${quick[@]}" --data "$SFT" --out "$WORK/bench" \
        --shapes "$shape" --steps 30 "${sweep[@]}" --json "$OUT/$1.json" ;;
    rl)
      timeout -k 10 "$2" "$PY" bench/bench_rl_gpu.py "${quick[@]}" --prompts "$RL" --encyclopedia "$DOCS" --sft-data "$SFT" --out "$WORK/bench" \
        --n-prompts 8 --group 8 --max-new-tokens 384 --steps 2 --rl-timeout $(($2 / 2)) --json "$OUT/rl.json" "${backend[@]}" ;;
    profile)
      timeout -k 10 "$2" "$PY" bench/bench_sft_gpu.py "${quick[@]}" --data "$SFT" --out "$WORK/demo-gpu" \
        --profile configs/demo-gpu.yaml --steps 300 --json "$OUT/profile.json" ;;
    profile-rl)
      timeout -k 10 "$2" "$PY" bench/bench_rl_gpu.py "${quick[@]}" --prompts "$RL" --encyclopedia "$DOCS" --sft-data "$SFT" \
        --out "$WORK/demo-gpu-rl" --profile configs/demo-gpu.yaml --steps 2 --rl-timeout $(($2 / 2)) \
        --json "$OUT/profile-rl.json" "${backend[@]}" ;;
    demo)
      # every CPU step must be in the carried store for this code (their keys hold its hash): else it stops
      # at once (exit 4) instead of collecting on device time; a rerun on the warm machine resumes
      # shellcheck disable=SC2086
      # --no-pages: device seconds go to the GPU steps, not the viewer's pages (`coa view` makes them later)
      timeout -k 10 "$2" "$PY" infra/run_plan.py -c configs/demo-gpu.yaml $DEMO_OVERRIDES --expect-reused cpu \
        --no-pages --json "$OUT/demo-gpu.json" ;;
    *) echo "error: unknown part '$1' (sft rl demo; optional: tests sft-1.5b sft-sweep profile profile-rl)" >&2
      return 2 ;;
  esac
}
declare -A BOUNDS=([sft]=120 [rl]=150 [tests]=150 [sft-1.5b]=200 [sft-sweep]=300 [profile]=120 [profile-rl]=150)
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(sft rl demo)
printf 'part\twall_s\tstatus\tbudget_left_s\n' >"$OUT/parts.tsv"
failed=0
for name in "${parts[@]}"; do
  [ "$name" = env ] && continue
  limit=$(bound $((${BOUNDS[$name]:-100000} * SCALE)))  # the demo: all the time left
  log=$OUT/$name.log; [ "$name" = demo ] && log=$OUT/demo-gpu.log
  step "$name (bound $limit s)"
  began=$(date +%s)
  if [ "$limit" -lt 20 ]; then
    echo "skipped: $limit s left of the budget"; status=skipped
  else
    # progress bars are dropped from the log (they fill the 12,000 characters the device returns)
    part "$name" "$limit" 2>&1 | grep --line-buffered -v -E 'it/s\]|examples/s\]|s/it\]' >"$log"
    status=${PIPESTATUS[0]}
    tail -n 25 "$log"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$(($(date +%s) - began))" "$status" "$(left)" | tee -a "$OUT/parts.tsv"
  [ "$status" = 0 ] || failed=1
done
step "done in $(($(date +%s) - T0)) s"
column -t "$OUT/parts.tsv" 2>/dev/null || cat "$OUT/parts.tsv"
exit "$failed"
