"""``coa models list|show|history|promote|rollback|export``: the model registry's champions, their
history, and the nightly history of a model name."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from coa import io
from coa._cli.common import _config, console, err
from coa.errors import UserError


def models_list() -> None:
    """Every registered model name with its champion and the number of history entries."""
    from coa.registry.store import Registry

    reg = Registry()
    table = Table(title=f"models in {reg.uri}")
    for col in ("name", "champion", "since", "entries"):
        table.add_column(col, overflow="fold")  # a URI is copied from here: folded, never elided
    for name in reg.names():
        current = reg.champion(name)
        table.add_row(
            name,
            current.model_uri if current else "-",
            current.since if current else "-",
            str(len(reg.history(name))),
        )
    console.print(table)


def models_show(name: Annotated[str, typer.Argument(help="Registered model name")]) -> None:
    """The champion of NAME, the champions before it, and every history entry with its reasons."""
    from coa.registry.store import Registry

    reg = Registry()
    current, history = reg.champion(name), reg.history(name)
    if current is None and not history:
        raise UserError(f"no model {name!r} in the registry ({', '.join(reg.names()) or 'empty'})")
    console.print(f"champion: {current.model_uri if current else '(none)'}", highlight=False)
    if current is not None:
        for uri, _ in reversed(current.previous):
            console.print(f"  before: {uri}", highlight=False)
    table = Table(title=f"history of {name}")
    for col in ("when", "event", "model", "reasons"):
        table.add_column(col, overflow="fold")
    for e in history:
        table.add_row(e.at, e.event, e.model_uri, "\n".join(e.reasons))
    console.print(table)


def models_history(name: Annotated[str, typer.Argument(help="Registered model name")]) -> None:
    """The nightly history of NAME: a row per night (data, training, metrics, the gate's verdict)."""
    from coa.registry.history import NightlyHistory

    rows = NightlyHistory(name).rows()
    if not rows:
        raise UserError(f"no nightly history for {name!r}: it is written by the nightly flow after each gate")

    def num(value: float | None, low: float | None = None, high: float | None = None) -> str:
        if value is None:
            return "-"
        return (
            f"{value:.3f} [{low:.3f}, {high:.3f}]" if low is not None and high is not None else f"{value:g}"
        )

    metric = next((r.metric for r in reversed(rows) if r.metric), "the gate's primary metric")
    level = next((f"{r.confidence:.0%} " for r in reversed(rows) if r.confidence), "")
    table = Table(title=f"nightly history of {name} ({metric}, with its {level}bootstrap interval)")
    for col in ("night", "new tasks", "runs", "kept", "teacher tokens", "cost $", "sft", "rl",
                "candidate", "champion", "verdict"):  # fmt: skip
        table.add_column(col, overflow="fold")
    for r in rows:
        verdict = f"stopped ({r.stopped}): " if r.stopped else "promoted: " if r.promoted else "refused: "
        verdict += r.reason
        table.add_row(r.night, num(r.tasks_new), num(r.runs_collected), num(r.runs_kept),
                      num(r.teacher_tokens), num(r.teacher_cost_usd), num(r.sft_steps), num(r.rl_steps),
                      num(r.candidate, r.candidate_low, r.candidate_high),
                      num(r.champion, r.champion_low, r.champion_high), verdict)  # fmt: skip
    console.print(table)


MirrorProfile = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML profile whose tracking section mirrors this into MLflow"),
]


def _mirror_into(profile: Path | None) -> None:
    """Activate ``profile``'s tracking section, so the registry change is mirrored into MLflow."""
    if profile is not None:
        _config(profile, None)


def models_promote(
    name: Annotated[str, typer.Argument(help="Registered model name")],
    model_uri: Annotated[
        str, typer.Argument(help="Model artifact URI (or folder / hub id) to make champion")
    ],
    reason: Annotated[str, typer.Option(help="Why (kept in the history)")] = "manual promotion",
    tracking_config: MirrorProfile = None,
) -> None:
    """Make MODEL_URI the champion of NAME by hand (no gate; the history records it)."""
    from coa.registry.store import Registry

    _mirror_into(tracking_config)
    ref = io.lookup(model_uri)
    if ref is None and "://" in model_uri:
        raise UserError(f"no committed artifact at {model_uri}")
    if ref is not None and ref.kind != "model":
        raise UserError(f"{model_uri} is a {ref.kind} artifact, not a model")
    champion = Registry().promote(name, ref.uri if ref else model_uri, reasons=[reason])
    console.print(f"{name}: champion is now {champion.model_uri}", highlight=False)


def models_rollback(
    name: Annotated[str, typer.Argument(help="Registered model name")],
    reason: Annotated[str, typer.Option(help="Why (kept in the history)")] = "manual rollback",
    tracking_config: MirrorProfile = None,
) -> None:
    """Restore the champion NAME had before the current one."""
    from coa.registry.store import Registry

    _mirror_into(tracking_config)
    champion = Registry().rollback(name, reason)
    console.print(f"{name}: champion restored to {champion.model_uri}", highlight=False)


def models_export(
    model: Annotated[str, typer.Argument(help="Model artifact URI or champion:NAME (the registry)")],
    out: Annotated[Path, typer.Argument(help="New folder: weights, tokenizer and a model card README.md")],
    license_id: Annotated[
        str | None,
        typer.Option(
            "--license", help="License id for the card (default: apache-2.0, or other on a hub base)"
        ),
    ] = None,
) -> None:
    """A Hugging Face model folder with a model card (from_pretrained and push_to_hub take it as is)."""
    from coa.registry.model_export import export_model

    result = export_model(model, str(out), license_id)
    console.print(f"{result.model_uri} -> {result.out} ({', '.join(result.files)})", highlight=False)
    if result.evaluation is None:
        err.print("note: no evaluation artifact of this model was found; the card has no benchmark figures")
