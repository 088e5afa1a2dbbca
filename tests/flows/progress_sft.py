"""The dispatched side of an SFT step, run as a GPU worker runs it: ``flows/step.py:run_one_step`` on
the step's spec (the demo profile's SFT with ``overrides``), against a Prefect server
(``PREFECT_API_URL``), printing the committed model's URI. From the repository root::

    python -m tests.flows.progress_sft MODEL_FOLDER CONVERTED_URI '["sft.max_steps=40", ...]'
"""

from __future__ import annotations

import json
import sys

from coa import io
from coa.plan.spec import spec_of
from coa.steps import resolve
from flows.step import run_one_step
from tests.flows.dispatch_sft import sft_of

if __name__ == "__main__":
    step, _ = sft_of(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
    store = io.Store()
    spec = spec_of(step, resolve(step, {}), store)
    uri = run_one_step(json.loads(spec.model_dump_json()), scope="progress")
    print(f"model: {uri}", flush=True)
