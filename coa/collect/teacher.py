"""Building the teacher a collection run uses: backend, tools, recording, all from one config.

``collect.backend: offline`` is the rule-based teacher over the synthetic families (no network);
``collect.backend: endpoint`` is the multi-agent teacher on an OpenAI-compatible endpoint
(``collect.llm``). The tools are real either way: BM25 search over a local collection (the synthetic
step's encyclopedia, handed to the step as its ``encyclopedia`` input) or a web/wiki provider, the
crawler, and Python in the sandbox. With
``tools.record`` every tool result goes into the observation store for offline replay.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from coa.agents.offline import RuleBasedBackend
from coa.agents.runtime import MultiAgentTeacher
from coa.collect.config import CollectConfig
from coa.errors import UserError
from coa.tools.build import build_toolbox, check_tools
from coa.tools.collection import Collection


@contextlib.asynccontextmanager
async def open_teacher(
    config: CollectConfig, storage_root: str | None, collection: Collection | None = None
) -> AsyncIterator[MultiAgentTeacher]:
    """The configured teacher, its local search serving ``collection`` (the step's encyclopedia);
    closes its HTTP clients on exit."""
    if config.preflight:  # the search endpoints, before anything is built (exit 3 within seconds)
        check_tools(config.tools, "collect.tools", collection)
    if config.backend == "offline":
        tools = build_toolbox(config.tools, storage_root, collection=collection, fix="collect.tools")
        offline = config.offline
        if "wiki_search" in config.tools.enabled and "web_search" not in config.tools.enabled:
            offline = offline.model_copy(update={"search_tool": "wiki_search"})
        yield MultiAgentTeacher(RuleBasedBackend(offline), tools, config.teacher)
        return
    from coa.agents.llm_backend import EndpointBackend
    from coa.llm import LLMRouter

    if not config.llm.endpoints:
        raise UserError(
            "collect.backend=endpoint needs collect.llm.endpoints (an OpenAI-compatible endpoint)"
        )
    if config.preflight:  # before anything is built: a dead or wrong endpoint fails in seconds (exit 3)
        from coa.llm.preflight import check_endpoints

        await check_endpoints([config.llm.endpoint("teacher")], what="teacher", fix="collect.llm.endpoints")
    tools = build_toolbox(config.tools, storage_root, collection=collection, fix="collect.tools")
    async with LLMRouter(config.llm) as router:
        yield MultiAgentTeacher(EndpointBackend(router), tools, config.teacher)
