"""The math worker process (``python -m coa.scoring._mathworker_main``): the other side of the pool in
:mod:`coa.scoring._mathworker`.

It answers comparisons with :mod:`coa.scoring.math` in its own main thread (where SIGALRM deadlines
work), one JSON request and one JSON reply per line (the protocol is described in
:mod:`coa.scoring._mathworker`). A module of its own so that the pool, which :mod:`coa.scoring.math`
calls, imports nothing of :mod:`coa.scoring.math` (no import cycle).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    """Worker loop: read requests from stdin, answer on the original stdout."""
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from coa.scoring import math as scoring_math  # after the redirect: nothing it prints reaches the protocol

    scoring_math.warm_up()
    protocol.write(b'{"ready": true}\n')
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("mode") == "afm":
            equal, why = scoring_math.afm_check_prepared(
                request["answer"], request["golds"], timeout_s=float(request["timeout_s"])
            )
            protocol.write((json.dumps({"equal": equal, "reason": why}) + "\n").encode())
            continue
        reason, index = scoring_math.check_prepared(
            request["pred_expr"],
            request["pred_raw"],
            bool(request["boxed"]),
            request["gold_exprs"],
            timeout_s=float(request["timeout_s"]),
            float_rounding=int(request["float_rounding"]),
        )
        protocol.write((json.dumps({"reason": reason, "index": index}) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
