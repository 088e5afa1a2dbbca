"""The tiny model, its codec and a coa.serve process (vLLM protocol), shared with tests/serve."""

from __future__ import annotations

from tests.rollout.conftest import codec, tiny_model  # noqa: F401 (fixtures)
from tests.serve.conftest import serve  # noqa: F401 (fixture)
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)
