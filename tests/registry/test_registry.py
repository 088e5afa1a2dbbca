"""The registry: promote, rollback, the append-only history, and a crash between the writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.registry.store import Registry, RegistryError


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_promote_rollback_and_history(storage_root: Path) -> None:
    reg = Registry()
    assert reg.champion("agent") is None and reg.names() == []
    with pytest.raises(RegistryError, match="no champion yet"):
        reg.resolve("agent")
    reg.promote("agent", "file:///m1", reasons=["first"])
    reg.record("agent", "file:///m2", verdict={"promote": False}, reasons=["regression on math"])
    reg.promote("agent", "file:///m3")
    assert reg.resolve("agent") == "file:///m3"
    assert [e.event for e in reg.history("agent")] == ["promote", "candidate", "promote"]
    assert reg.history("agent")[1].reasons == ("regression on math",)
    first_files = {p: (storage_root / p).read_bytes() for p in _files(storage_root) if "history" in p}

    restored = reg.rollback("agent", "bad in production")
    assert restored.model_uri == "file:///m1" and reg.resolve("agent") == "file:///m1"
    assert restored.entry == reg.history("agent")[0].id  # the entry that first made it champion
    with pytest.raises(RegistryError, match="no earlier champion"):
        reg.rollback("agent")
    history = reg.history("agent")
    assert [e.event for e in history] == ["promote", "candidate", "promote", "rollback"]
    assert history[-1].previous == "file:///m3" and history[-1].reasons == ("bad in production",)
    # append-only: the earlier entries are byte for byte what they were
    assert all((storage_root / p).read_bytes() == data for p, data in first_files.items())
    assert reg.names() == ["agent"]
    with pytest.raises(RegistryError, match="invalid model name"):
        reg.champion("../etc")


def test_crash_between_history_and_alias_leaves_the_old_champion(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = Registry()
    reg.promote("agent", "file:///m1")

    def crash(self: Registry, champion: object) -> None:
        raise OSError("power cut")

    with monkeypatch.context() as patch:
        patch.setattr(Registry, "_write_alias", crash)
        with pytest.raises(OSError, match="power cut"):
            reg.promote("agent", "file:///m2")
    assert reg.resolve("agent") == "file:///m1"  # exactly one champion: the old one
    aliases = [p for p in _files(storage_root) if p.endswith("champion.json")]
    assert aliases == ["registry/agent/champion.json"]
    assert [e.event for e in reg.history("agent")] == ["promote", "promote"]  # the attempt is on record


def test_crash_inside_the_alias_write_leaves_no_partial_file(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = Registry()
    reg.promote("agent", "file:///m1")
    real_mv = reg.fs.mv

    def failing_mv(src: str, dst: str, **kw: object) -> None:
        if dst.endswith("champion.json"):
            raise OSError("disk full")
        real_mv(src, dst, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(reg.fs, "mv", failing_mv)
        with pytest.raises(OSError, match="disk full"):
            reg.promote("agent", "file:///m2")
    assert Registry().resolve("agent") == "file:///m1"
    leftovers = [p for p in _files(storage_root) if "/.tmp-" in p or p.split("/")[-1].startswith(".tmp-")]
    assert leftovers == []


def test_registry_on_s3_uses_the_same_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    monkeypatch.setenv("COA_STORAGE_ROOT", "memory://coa-test-registry")
    reg = Registry()
    reg.promote("agent", "memory://m1")
    reg.promote("agent", "memory://m2")
    assert reg.rollback("agent").model_uri == "memory://m1"
    assert memory.exists("/coa-test-registry/registry/agent/champion.json")
    assert len(reg.history("agent")) == 3
    memory.rm("/coa-test-registry", recursive=True)


def test_the_verdict_reads_back_typed_and_the_mirror_gets_it_typed(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history keeps the verdict as the gate wrote it; readers (the MLflow mirror) read it typed."""
    from coa.registry import store
    from coa.registry.gate import Verdict

    mirrored: list[tuple[str, object]] = []
    monkeypatch.setattr(store, "mirror_event", lambda event, n, uri, v, reasons: mirrored.append((event, v)))
    reg = Registry()
    verdict = Verdict(promote=False, reasons=("no gain",), checks={"lineage": True, "gain": False})
    reg.record("agent", "file:///m1", verdict=verdict.to_dict(), reasons=verdict.reasons)
    reg.promote("agent", "file:///m2", verdict={"run": "manual"})  # a record without the gate's keys
    first, second = reg.history("agent")
    assert first.verdict == verdict.to_dict()  # stored as written
    decision = first.decision()
    assert (
        decision is not None
        and decision.promote is False
        and decision.checks == {"lineage": True, "gain": False}
    )
    assert decision.reasons == ("no gain",)
    manual = second.decision()
    assert manual is not None and manual.promote is False and manual.checks == {}
    assert [e for e, _ in mirrored] == ["candidate", "promote"]
    assert mirrored[0][1] == decision and mirrored[1][1] == manual


def test_the_cli_prints_every_uri_whole_on_a_narrow_console(
    storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console
    from typer.testing import CliRunner

    from coa._cli import models as models_cli
    from coa.cli import app

    uri = "file:///" + "/".join(f"folder-{i:02d}" for i in range(12)) + "/model/sft-143857e493c9a281"
    Registry().promote("agent", uri, reasons=["first"])
    monkeypatch.setattr(models_cli, "console", Console(width=80))
    for command in (["models", "list"], ["models", "show", "agent"]):
        out = CliRunner().invoke(app, command)
        assert out.exit_code == 0, out.output
        # folded over the table's lines, never cut with an ellipsis: the cells read back to the URI
        cells = [line.split("│") for line in out.stdout.splitlines() if line.count("│") > 2]
        assert "…" not in out.stdout
        columns = ["".join(c.strip() for c in column) for column in zip(*cells, strict=False)]
        assert any(uri in column for column in columns), out.stdout
