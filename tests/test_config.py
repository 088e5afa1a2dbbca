"""Config layering, typo errors with paths, overrides, and every file in configs/ loading."""

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coa.config import ConfigError, apply_overrides, build_config
from coa.plan import PipelineConfig, load_pipeline_config

REPO = Path(__file__).resolve().parents[1]
PROFILES = sorted(p for p in (REPO / "configs").glob("*.yaml"))


def test_configs_folder_is_not_empty() -> None:
    assert {p.name for p in PROFILES} >= {"base.yaml", "demo.yaml", "nightly.yaml"}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_profile_loads(path: Path) -> None:
    cfg = load_pipeline_config(path)
    assert isinstance(cfg, PipelineConfig)
    for source in cfg.tasks.sources:
        assert (REPO / source.path).exists(), f"{path.name}: task source {source.path} does not exist"


def test_profile_inherits_base_and_overrides_it() -> None:
    cfg = load_pipeline_config(REPO / "configs" / "demo.yaml")
    assert cfg.run_name == "demo"  # profile wins over base
    assert cfg.tasks.name == "tasks"  # inherited from base
    assert cfg.collect is not None and cfg.collect.backend == "offline"


def test_overrides_win_and_parse_yaml_scalars() -> None:
    cfg = load_pipeline_config(REPO / "configs" / "demo.yaml", ["collect.concurrency=3", "run_name=x"])
    assert cfg.collect.concurrency == 3
    assert cfg.run_name == "x"


def test_typo_in_yaml_names_the_dotted_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  sources:\n    - pth: a.jsonl\n")
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(bad)
    assert "tasks.sources.0.pth: unknown key (did you mean 'path'?)" in str(e.value)
    assert str(bad) in str(e.value)


def test_typo_in_override_names_the_path() -> None:
    with pytest.raises(ConfigError, match=r"tasks\.nmae: unknown key \(did you mean 'name'\?\)"):
        load_pipeline_config(REPO / "configs" / "demo.yaml", ["tasks.nmae=x"])


def test_wrong_type_is_reported_with_path() -> None:
    with pytest.raises(ConfigError, match=r"collect\.concurrency"):
        load_pipeline_config(REPO / "configs" / "demo.yaml", ["collect.concurrency=many"])


def test_override_index_out_of_range() -> None:
    with pytest.raises(ConfigError, match="not a valid index"):
        apply_overrides({"tasks": {"sources": []}}, ["tasks.sources.3.path=x"])


def test_override_mapping_without_spaces_says_how_to_write_it() -> None:
    # YAML reads {code:6} as the key "code:6" with no value: refused with the two ways that work
    with pytest.raises(ConfigError, match=r"round_sft\.repeat\.code=6"):
        apply_overrides({}, ["round_sft.repeat={code:6,mhqa:2}"])
    with pytest.raises(
        ConfigError,
        match=r"space after the colon in a mapping\): write a='\[\{x: 1\}\]' \(quoted in the shell\)$",
    ):
        apply_overrides({}, ["a=[{x:1}]"])  # inside a list: no one-key form to offer
    assert apply_overrides({}, ["round_sft.repeat={code: 6, mhqa: 2}"]) == {
        "round_sft": {"repeat": {"code": 6, "mhqa": 2}}
    }
    assert apply_overrides({}, ["hosts={'http://x': null}"]) == {"hosts": {"http://x": None}}


def test_override_without_equals() -> None:
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides({}, ["tasks.name"])


def test_inherit_cycle_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("inherit: b.yaml\n")
    (tmp_path / "b.yaml").write_text("inherit: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_pipeline_config(tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match="not found"):
        load_pipeline_config(tmp_path / "missing.yaml")


def test_invalid_yaml(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("tasks: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_pipeline_config(tmp_path / "x.yaml")


def test_configs_are_frozen() -> None:
    cfg = build_config({}, PipelineConfig)
    with pytest.raises(ValidationError):
        cfg.run_name = "other"  # type: ignore[misc]


def test_fingerprint_is_stable_and_sensitive() -> None:
    a = build_config({"run_name": "a"}, PipelineConfig)
    assert a.fingerprint() == build_config({"run_name": "a"}, PipelineConfig).fingerprint()
    assert a.fingerprint() != build_config({"run_name": "b"}, PipelineConfig).fingerprint()


def test_the_tools_no_longer_choose_an_encyclopedia_and_say_where_it_lives() -> None:
    """The encyclopedia is set once (``synthetic``); a profile that still sets it in a tools section
    is refused with the keys that replace it, never silently ignored."""
    demo = REPO / "configs" / "demo.yaml"
    moved = (
        r"encyclopedia_(seed|entities): the tools no longer choose an encyclopedia.*"
        r"set synthetic\.encyclopedia_seed and synthetic\.encyclopedia_size"
    )
    for override in (
        "tools.web.encyclopedia_seed=5",
        "evaluate.tools={encyclopedia_entities: 900}",
        "collect.tools={encyclopedia_seed: 1}",
    ):
        with pytest.raises(ConfigError, match=moved):
            load_pipeline_config(demo, [override])
    # the encyclopedia's size is the synthetic section's alone: no second copy to keep equal
    assert load_pipeline_config(demo, ["synthetic.encyclopedia_size=1200"]).synthetic is not None


JUDGE: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", "model": "judge-7b", "max_concurrency": 2}


def test_an_endpoint_and_a_tool_set_declared_once_reach_every_section_that_names_them() -> None:
    """``endpoints:`` and ``tools:`` at the top of a profile, named from the sections: each section
    gets the declaration itself (the same config as written inline, so the same step keys), and an
    edit of the one declaration reaches every section that names it."""
    from coa.llm.config import EndpointConfig, LLMConfig
    from coa.tools.config import ToolsConfig

    profile: dict[str, Any] = {
        "endpoints": {"teacher": {"base_url_env": "COA_TEACHER_BASE_URL", "model": "big"}, "judge": JUDGE},
        "tools": {"web": {"enabled": ["web_search", "crawl_page"], "search": {"top_k": 4}}},
        "collect": {"backend": "endpoint", "llm": {"endpoints": ["teacher", "judge"], "judge": "judge"}},
        "curate": {"judge": "judge"},
        "evaluate": {"judge": "judge", "endpoint": "judge", "backend": "endpoint", "tools": "web"},
        "rl": {"max_steps": 1, "judge": "judge", "judge_audit_set": "audit.jsonl", "tools": "web"},
    }
    cfg = build_config(profile, PipelineConfig)
    judge = EndpointConfig(name="judge", **JUDGE)
    assert cfg.endpoints["judge"] == judge
    assert cfg.curate and cfg.evaluate and cfg.rl and cfg.collect  # for the type checker
    for section in (cfg.curate.judge, cfg.evaluate.judge, cfg.rl.judge):
        assert section == LLMConfig(endpoints=(judge,))
    assert cfg.evaluate.endpoint == judge
    assert [e.name for e in cfg.collect.llm.endpoints] == ["teacher", "judge"]
    assert cfg.collect.llm.endpoints[1] == judge and cfg.collect.llm.judge == "judge"
    web = ToolsConfig(enabled=("web_search", "crawl_page"), search={"top_k": 4})  # type: ignore[arg-type]
    assert cfg.evaluate.tools == web and cfg.rl.tools == web
    # the inline form is still accepted and is the same config (so the same keys)
    written = {**profile, "rl": {**profile["rl"], "judge": {"endpoints": [{"name": "judge", **JUDGE}]}}}
    inline = build_config(written, PipelineConfig)
    assert inline.rl == cfg.rl
    # one edit of the declaration reaches every section naming it
    moved = build_config(apply_overrides(profile, ["endpoints.judge.model=judge-70b"]), PipelineConfig)
    assert moved.curate and moved.evaluate and moved.rl and moved.evaluate.endpoint and moved.rl.judge
    models = {moved.evaluate.endpoint.model, moved.rl.judge.endpoints[0].model}
    assert models | {moved.collect.llm.endpoints[1].model} == {"judge-70b"}  # type: ignore[union-attr]


def test_a_name_nothing_declares_is_refused_saying_what_is() -> None:
    for section, where, what in (
        ({"rl": {"max_steps": 1, "judge": "jugde"}}, "rl.judge", "endpoints"),
        ({"evaluate": {"endpoint": "jugde"}}, "evaluate.endpoint", "endpoints"),
        ({"collect": {"llm": {"endpoints": ["jugde"]}}}, r"collect.llm.endpoints", "endpoints"),
        ({"evaluate": {"tools": "wbe"}}, "evaluate.tools", "tools"),
    ):
        with pytest.raises(ConfigError, match=rf"{where}: no {what} named '(jugde|wbe)' \(declared under the "
                           rf"profile's top-level `{what}:`: (judge|web)\); declare it there"):  # fmt: skip
            build_config({"endpoints": {"judge": JUDGE}, "tools": {"web": {}}, **section}, PipelineConfig)
    with pytest.raises(ConfigError, match="endpoints.judge: its name is its key"):
        build_config({"endpoints": {"judge": {**JUDGE, "name": "other"}}}, PipelineConfig)


def test_an_override_beneath_a_named_slot_changes_that_section_only() -> None:
    """The demo names its tool sets (``collect.tools: web``, ``rl.tools: code_only``): an override
    beneath one section's slot gives that section its own copy; one of the declaration reaches all."""
    demo = REPO / "configs" / "demo.yaml"
    base = load_pipeline_config(demo)
    assert base.collect and base.rl and base.collect.tools == base.tools["web"]
    own = load_pipeline_config(demo, ["rl.tools.enabled=[web_search, code]", "collect.tools.search.top_k=2"])
    assert own.rl and own.collect and own.rl.tools.enabled == ("web_search", "code")
    assert own.collect.tools.search.top_k == 2 and own.tools == base.tools  # the declarations unchanged
    everywhere = load_pipeline_config(demo, ["tools.web.search.top_k=3"])
    assert everywhere.collect and everywhere.collect.tools.search.top_k == 3
