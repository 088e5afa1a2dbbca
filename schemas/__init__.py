"""Data contracts: one module per artifact, each a documented pyarrow schema with an id.

``get(schema_id)`` returns the contract for an id such as ``"task.v1"``; ``ALL`` lists them.
"""

from schemas._contract import SCHEMA_ID_KEY, Column, ColumnReport, Contract, ContractError, ContractReport
from schemas.document import DOCUMENT
from schemas.eval import EVAL
from schemas.quarantine import QUARANTINE
from schemas.rl_prompt import RL_PROMPT
from schemas.rollout import ROLLOUT
from schemas.sft import SFT
from schemas.task import TASK
from schemas.task_stats import TASK_STATS
from schemas.trajectory import TRAJECTORY

ALL: dict[str, Contract] = {
    c.id: c for c in (TASK, TRAJECTORY, QUARANTINE, SFT, RL_PROMPT, ROLLOUT, EVAL, TASK_STATS, DOCUMENT)
}


def get(schema_id: str) -> Contract:
    """The contract for ``schema_id`` (e.g. ``"task.v1"``); a clear error lists the known ids."""
    try:
        return ALL[schema_id]
    except KeyError:
        raise KeyError(f"unknown schema id {schema_id!r}; known: {', '.join(sorted(ALL))}") from None


__all__ = [
    "ALL",
    "DOCUMENT",
    "EVAL",
    "QUARANTINE",
    "RL_PROMPT",
    "ROLLOUT",
    "SCHEMA_ID_KEY",
    "SFT",
    "TASK",
    "TASK_STATS",
    "TRAJECTORY",
    "Column",
    "ColumnReport",
    "Contract",
    "ContractError",
    "ContractReport",
    "get",
]
