"""A recipe: what the kit needs to know about one trainer (SFT, GRPO), in one frozen object.

The kit's functions (:mod:`~coa.kit.run`, :mod:`~coa.kit.launch`,
:mod:`~coa.kit.entry`) take a :class:`Recipe` and so read and write the same files, guard
the same way and fail with the same messages for every trainer; each recipe module declares its
instance beside its config (``coa.train.config.SFT``, ``coa.rl.config.RL``). Light to import.
"""

from __future__ import annotations

import dataclasses

from coa.errors import CoaError


class TrainError(CoaError, RuntimeError):
    """Base of a recipe's errors: a run that cannot start or cannot be reported."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One trainer's names, files and errors."""

    name: str
    """Short name: logs, tracker run names (``sft``, ``rl``)."""
    title: str
    """How messages name it (``SFT``, ``RL``)."""
    module: str
    """The module ``python -m`` / ``accelerate launch -m`` runs (its ``main``)."""
    plan_file: str
    """The plan a resumed run must match (``sft_plan.json``)."""
    result_file: str
    """The result a finished run writes (``sft_result.json``)."""
    data_field: str
    """The run config's field naming its input rows (``data``, ``prompts``)."""
    data_file: str
    """The Parquet file a launched run reads its rows from, in the output folder."""
    resume_free: frozenset[str]
    """Config fields that may change between a run and its resumption."""
    error: type[TrainError]
    """What the kit raises for a run that cannot start or be reported."""
    step_count_error: type[TrainError]
    """What the steps-run guard raises (a :class:`~coa.errors.CheckFailed`)."""
    check_errors: tuple[type[TrainError], ...] = ()
    """The recipe's other failed checks (e.g. an entropy collapse), re-raised from a launched run."""
    logger: str = "coa.train"
    """The logger its training lines go to."""

    def errors(self) -> dict[str, type[TrainError]]:
        """Every error a launched run may report, by class name."""
        return {e.__name__: e for e in (self.error, self.step_count_error, *self.check_errors)}
