"""coa.evaluate: run a CoA model on tasks with real tools, and score it.

* :mod:`~coa.evaluate.config`: :class:`EvalConfig` (limits, backend, prompt style);
* :mod:`~coa.evaluate.generation`: :class:`HFGenerator` (transformers, in process) and
  :class:`EndpointGenerator` (an OpenAI-compatible completions server such as vLLM);
* :mod:`~coa.evaluate.inference`: the loop (generate until a tool tag closes, run the tool, append
  the observation, stop on ``answer`` or a limit; a forged observation is a format error);
* :mod:`~coa.evaluate.metrics`: format-valid rate, accuracy, tokens and tool calls per task;
* :mod:`~coa.evaluate.stage`: :func:`evaluate_tasks` → ``eval.v1``;
* :mod:`~coa.evaluate.step`: the evaluation step (→ ``eval`` artifact) and the training-report step;
* :mod:`~coa.evaluate.report`: the training report (before/after SFT beside the teacher).
"""

from coa.evaluate.config import EvalConfig
from coa.evaluate.generation import Completion, EndpointGenerator, Generator, HFGenerator
from coa.evaluate.metrics import eval_metrics, format_metrics_table
from coa.evaluate.stage import evaluate_tasks

__all__ = [
    "Completion",
    "EndpointGenerator",
    "EvalConfig",
    "Generator",
    "HFGenerator",
    "eval_metrics",
    "evaluate_tasks",
    "format_metrics_table",
]
