#!/usr/bin/env bash
# Two nights of the nightly flow against a Prefect server with its UI; then the history plot's artifact in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PREFECT_HOME=$(mktemp -d) PREFECT_SERVER_ANALYTICS_ENABLED=false COA_STORAGE_ROOT=$(mktemp -d)/store
PORT=4391
export PREFECT_UI_API_URL=http://127.0.0.1:$PORT/api
.venv/bin/prefect server start --host 127.0.0.1 --port $PORT > /tmp/coa-shot-server.log 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
for i in $(seq 90); do curl -sf http://127.0.0.1:$PORT/api/health >/dev/null && break; sleep 1; done
export PREFECT_API_URL=http://127.0.0.1:$PORT/api
PYTHONPATH=. .venv/bin/python - <<'PY'
from flows.nightly import nightly
from tests.flows.test_nightly import NIGHT
r1 = nightly(config_path="configs/demo.yaml", overrides=["synthetic.train={arithmetic: 6, multihop: 6, programming: 3}", *NIGHT], night="2026-01-01")
print("night 1:", r1["outcome"])
r2 = nightly(config_path="configs/demo.yaml", overrides=["synthetic.train={arithmetic: 12, multihop: 12, programming: 6}", *NIGHT], night="2026-01-02")
print("night 2:", r2["outcome"])
PY
for key in nightly-demo-history-plot nightly-demo-history; do
  id=$(curl -s -X POST http://127.0.0.1:$PORT/api/artifacts/filter -H 'content-type: application/json' \
    -d "{\"artifacts\": {\"key\": {\"any_\": [\"$key\"]}}, \"sort\": \"CREATED_DESC\", \"limit\": 1}" \
    | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
  chromium --headless=new --no-sandbox --disable-gpu --virtual-time-budget=30000 --user-data-dir=$(mktemp -d) \
    --window-size=1400,1300 --screenshot=${SHOTS:-/tmp}/$key.png http://127.0.0.1:$PORT/artifacts/artifact/$id 2>/dev/null || true
done
ls -la "${SHOTS:-/tmp}"/nightly-demo-history*.png
