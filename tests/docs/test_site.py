"""The documentation site builds with ``mkdocs build --strict`` and its reference is generated.

The reference pages come from the code at build time (``docs/_hooks/reference.py``): the CLI's help
per command, every config field walked from the root model, every data contract. A broken link or
a page missing from the nav fails the strict build; the second test shows that it does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_site_builds_strict_with_generated_reference(tmp_path: Path) -> None:
    import schemas
    from coa.plan import PipelineConfig

    result = _build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    for page in ("quickstart", "performance", "how-to/model-cards", "how-to/gpu-pools", "concepts/steps"):
        assert (site / page / "index.html").is_file(), page
    config = (site / "reference/config/index.html").read_text()
    # every field of the root config and of a nested section, with its description and default
    assert "sft.<wbr>learning_rate" in config
    for name in PipelineConfig.model_fields:
        assert f"<code>{name}</code>" in config or f"<code>{name}.<wbr>" in config, name
    assert "evaluate.<wbr>benchmarks.<wbr>N.<wbr>limit" in config  # a list item's field
    assert "tools.<wbr>NAME.<wbr>search.<wbr>retrieve.<wbr>url" in config  # a mapping item's, 5 levels down
    assert "endpoints.<wbr>NAME.<wbr>api_key_env" in config  # the endpoints, declared once
    assert "collect.<wbr>llm.<wbr>endpoints.<wbr>N" not in config  # where they are named: names
    description = PipelineConfig.model_fields["dispatch"].description or ""
    assert description.split(";")[0].replace("'", "&#x27;") in config
    contracts = (site / "reference/contracts/index.html").read_text()
    for contract in schemas.ALL.values():
        assert contract.id in contracts
        for column in contract.columns:
            assert column.name.split("_")[0] in contracts
    assert "trajectory.v1" in contracts and "gold_in_observation" in contracts.replace("<wbr>", "")
    cli = (site / "reference/cli/index.html").read_text()
    for command in ("coa run", "coa models promote", "coa models export", "coa export", "coa format check"):
        assert command in cli, command
    assert "--dry-run" in cli


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    (docs / "quickstart.md").write_text(
        (docs / "quickstart.md").read_text() + "\nSee [the missing page](no-such-page.md).\n"
    )
    config = tmp_path / "mkdocs.yml"
    text = (REPO / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    config.write_text(text.replace("  - docs/_hooks/reference.py", f"  - {docs}/_hooks/reference.py"))
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


STEP_NAMES = {"evaluate.after", "evaluate.after_rl", "evaluate.sft"}
"""Step names the pages mention that look like config keys (``evaluate`` steps of the plans)."""
WRONG_ON_PURPOSE = {
    "tasks.sources.0.pth",
    "rl.tools.enabled",
    "collect.tools.search.serper",
    "evaluate.tools.wiki.retrieve",
}
"""The misspelt key of the example of an unknown-key error (docs/usage.md), the refused override
beneath a named slot (docs/usage.md), and the keys a failed search check names, as the stage sees
its tool set (docs/how-to/search-and-crawl.md)."""


def test_every_config_key_the_pages_name_exists() -> None:
    """A hand-written page that names `section.key` names a key of the configuration as it is now."""
    import re
    import typing

    from coa.plan import PipelineConfig

    keys: dict[str, object] = {}

    def walk(model: typing.Any, prefix: str) -> None:
        for name, field in model.model_fields.items():
            keys[prefix + name] = field.annotation
            for arg in (field.annotation, *typing.get_args(field.annotation)):
                inner = [
                    a
                    for a in (arg, *typing.get_args(arg))
                    if isinstance(a, type) and hasattr(a, "model_fields")
                ]
                for sub in inner:
                    listed = typing.get_origin(arg) in (tuple, list)
                    walk(sub, f"{prefix}{name}.N." if listed else f"{prefix}{name}.")

    walk(PipelineConfig, "")
    from coa.plan import load_pipeline_config, plan
    from coa.plan.names import NAMED_KEYS

    keys = {k: t for k, t in keys.items() if not any(k.startswith(n + ".") for n in NAMED_KEYS)}  # names

    rounds = load_pipeline_config(REPO / "configs" / "demo.yaml", ["rounds=3"])  # the round steps' names
    step_names = STEP_NAMES | {s.name for s in plan(rounds)}
    mappings = {
        k
        for k, t in keys.items()
        if any(a is dict or typing.get_origin(a) is dict for a in (t, *typing.get_args(t)))
    }  # dict[str, int], and dict[str, int] | None (a field of round_sft)
    sections = set(PipelineConfig.model_fields)
    unknown = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        for token in re.findall(r"`([a-z_][a-z0-9_.]*)(?:[=:][^`]*)?`", page.read_text()):
            if "." not in token or token.split(".")[0] not in sections or token in WRONG_ON_PURPOSE:
                continue
            if re.search(r"\.(v\d+|parquet|json|yaml|py|md|jinja)$", token):  # a contract id or a file
                continue
            key = re.sub(r"\.\d+(?=\.|$)", ".N", token)
            if key in keys or key in step_names or any(key.startswith(m + ".") for m in mappings):
                continue
            unknown.append(f"{page.relative_to(REPO)}: {token}")
    assert unknown == [], unknown
