"""The tracking helpers: summary → metrics, tags without secrets, report_to, the log folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa import tracking
from coa.plan import load_pipeline_config
from coa.tracking.config import TrackingConfig


def test_summary_numbers_become_metrics_with_tracker_safe_names() -> None:
    summary = {
        "metrics": {"all": {"pass@1": 0.5, "pass@1_se": 0.1, "maj@4": 0.75, "n": 8, "tasks_x": None}},
        "tokens_vs_teacher": {"all": {"token_reduction": 0.42, "benchmark": "all"}},
        "gate_success": False,
        "headline": "text is not a metric",
        "config": {"seed": 1},
        "nan": float("nan"),
    }
    assert tracking.metric_items(summary) == {
        "metrics/all/pass_at_1": 0.5,
        "metrics/all/pass_at_1_se": 0.1,
        "metrics/all/maj_at_4": 0.75,
        "metrics/all/n": 8.0,
        "tokens_vs_teacher/all/token_reduction": 0.42,
        "gate_success": 0.0,
    }


def test_tags_carry_the_uris_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COA_S3_SECRET_TOKEN", "hunter2-very-secret")
    tags = tracking.tags_of(
        "s3://bucket/model/sft-abc", ["https://user:pw@host/x", "s3://b/hunter2-very-secret/y"], "sft"
    )
    assert tags == {
        "coa.step": "sft",
        "coa.artifact_uri": "s3://bucket/model/sft-abc",
        "coa.upstream.0": "https://***@host/x",
        "coa.upstream.1": "s3://b/***/y",
    }


def test_report_to_log_dir_and_activation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracking.ENV, raising=False)
    assert tracking.current().backend == "none" and tracking.report_to(tracking.current()) == "none"
    board = TrackingConfig(backend="tensorboard")
    assert tracking.report_to(board) == ["tensorboard"]
    assert tracking.log_dir(board, str(tmp_path)) == tmp_path / "tracking" / "tensorboard"
    assert tracking.log_dir(board.model_copy(update={"log_dir": "/x/tb"}), "s3://b/r") == Path("/x/tb")
    with pytest.raises(tracking.TrackingUnavailable, match="set tracking.log_dir"):
        tracking.log_dir(board, "s3://bucket/root")
    with tracking.activate(board):
        assert tracking.current() == board
    assert tracking.current().backend == "none"
    config = load_pipeline_config(
        "configs/demo.yaml", ["tracking.backend=mlflow", "tracking.uri=http://h:5000"]
    )
    assert config.tracking.backend == "mlflow" and config.tracking.uri == "http://h:5000"
    assert load_pipeline_config("configs/demo.yaml").tracking.backend == "none"  # the offline default
