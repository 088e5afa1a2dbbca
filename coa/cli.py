"""The ``coa`` command line: run the pipeline, run one stage, inspect and validate artifacts.

This module is the entry point (``coa = "coa.cli:main"``) and the assembly of the command tree; the
commands live in :mod:`coa._cli` by concern: :mod:`~coa._cli.run` (``coa run``),
:mod:`~coa._cli.stages` (one stage at a time: a command per stage, generated from the stage table
with :mod:`~coa._cli.commands`), :mod:`~coa._cli.export` (converted data for other trainers),
:mod:`~coa._cli.inspect` (show, validate, lineage, format check), :mod:`~coa._cli.models` (the
registry), :mod:`~coa._cli.tools` (one tool call), :mod:`~coa._cli.score` (prediction files),
:mod:`~coa._cli.view` (the episode viewer), over the helpers of :mod:`~coa._cli.common`.

Every stage command builds the same :class:`~coa.steps.Step` the pipeline's plan builds and runs it
through :func:`coa.steps.run_step`, so ``coa collect …`` and the flow give the same artifact for the
same inputs. Every command has ``--help``. Errors are one line with the fix, no traceback
(:func:`main`); exit codes: 0 success, 1 a check failed (contract, gate, steps-run guard), 2 bad
input or usage (a file, a config key, a missing artifact), 3 missing infrastructure (sandbox,
endpoint).
"""

from __future__ import annotations

from typing import Any

import typer

from coa import io
from coa._cli import export, inspect, models, run, score, stages, tools, view
from coa._cli.common import err
from coa.errors import CoaError, describe


class _OneLineErrors(stages.TopLevel):
    """The top-level group: a project error (:class:`~coa.errors.CoaError`) from any command is one
    line on stderr and its exit code (2 input, 1 check failed, 3 infrastructure), never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CoaError as e:
            err.print(f"[bold red]error:[/] {describe(e)}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except OSError as e:
            # a full disk or a failing store outside a step (the runner maps both inside one)
            said = io.storage_failure(e)
            if io.is_disk_full(e):
                infra: CoaError = io.StorageFull(f"no space left on the device ({e}): free space and rerun")
            elif "couldn't connect to" in str(e):  # transformers: a hub model neither cached nor reachable
                from coa._cli.common import hub_unreachable

                infra = hub_unreachable(None, " ".join(str(e).split())[:200])
            elif said is not None:
                infra = io.StorageUnavailable(
                    f"the store failed a request ({said}): check the storage service "
                    "(COA_S3_ENDPOINT_URL, credentials, the bucket) and rerun"
                )
            else:
                raise
            err.print(f"[bold red]error:[/] {describe(infra)}", highlight=False, soft_wrap=True)
            raise typer.Exit(infra.exit_code) from None


app = typer.Typer(
    help="coa-pipeline: a factory for Chain-of-Agents agent models.", no_args_is_help=True, cls=_OneLineErrors
)
tasks_app = typer.Typer(
    help="Task sets: import benchmark and training task files into task.v1.",
    no_args_is_help=True,
    cls=stages.group("tasks"),
)
app.add_typer(tasks_app, name="tasks")
tool_app = typer.Typer(
    help="Run one tool and print the observation the model would see.", no_args_is_help=True
)
app.add_typer(tool_app, name="tool")
model_app = typer.Typer(
    help="Student models: build the tiny local student.", no_args_is_help=True, cls=stages.group("model")
)
app.add_typer(model_app, name="model")
format_app = typer.Typer(help="The Chain-of-Agents format: check trajectories against a grammar variant.")
app.add_typer(format_app, name="format")
models_app = typer.Typer(
    help="The model registry: champions (what `--model champion:NAME` names) and their history.",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")

# the commands, in the order `coa --help` lists them
app.command(context_settings={"allow_extra_args": False})(run.run)
# after `run`: the stage commands by today's names (coa collect, coa tasks synthetic…), generated
# when called (coa._cli.stages.StageCommands), and `coa stage NAME` for every stage
stage_app = typer.Typer(help=stages.STAGE_HELP, no_args_is_help=True, cls=stages.group(stages.STAGE_GROUP))
app.add_typer(stage_app, name=stages.STAGE_GROUP)
app.command("score")(score.score)
app.command("export")(export.export_cmd)
tool_app.command("code")(tools.tool_code)
tool_app.command("search")(tools.tool_search)
tool_app.command("crawl")(tools.tool_crawl)
format_app.command("check")(inspect.format_check)
app.command()(inspect.validate)
app.command()(inspect.show)
app.command()(view.view)
models_app.command("list")(models.models_list)
models_app.command("show")(models.models_show)
models_app.command("history")(models.models_history)
models_app.command("promote")(models.models_promote)
models_app.command("rollback")(models.models_rollback)
models_app.command("export")(models.models_export)
app.command()(inspect.lineage)


async def _prefect_secret_block(name: str) -> Any:
    """An endpoint's ``api_key_block``, read as a Prefect Secret block by the Prefect layer (loaded only
    when a command reads one: the domain library reads environment variables only)."""
    from tasks.secret_blocks import read_secret_block

    return await read_secret_block(name)


def main() -> None:
    from coa.llm.secrets import set_secret_block_reader

    set_secret_block_reader(_prefect_secret_block)
    app()


if __name__ == "__main__":
    main()
