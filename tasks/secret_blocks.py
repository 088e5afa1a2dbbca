"""The Prefect Secret block behind an endpoint's ``api_key_block``.

:mod:`coa` reads API keys from environment variables only and imports no Prefect; this module, in
the Prefect layer, reads a named Secret block and installs that lookup into :mod:`coa.llm.secrets`
when it is imported (the :mod:`tasks` package imports it, so every flow and task run has it). The
value is only returned to the LLM client, which places it in the ``Authorization`` header.
"""

from __future__ import annotations

from typing import Any

from prefect.blocks.system import Secret

from coa.llm.secrets import set_secret_block_reader


async def read_secret_block(name: str) -> Any:
    """The value held by the Prefect Secret block ``name`` (errors are scrubbed by the caller)."""
    block = await Secret.aload(name)
    return block.get()  # type: ignore[attr-defined]


set_secret_block_reader(read_secret_block)
