"""What lineage masks: secret values, never the artifact key, token counts or the names of variables."""

from __future__ import annotations

import pytest

from coa import io
from coa.settings import redact


def test_redact_masks_secret_values_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-live-123456789")
    data = {
        "key": "0123abcd",
        "api_key": "literal",
        "api_key_env": "MY_API_KEY",
        "base_url_env": "COA_TEACHER_BASE_URL",
        "max_total_tokens": 1536,
        "prompt_tokens": 12,
        "auth_token": "t0k3n",
        "password": "hunter2",
        "note": "called with sk-live-123456789",
    }
    out = redact(data)
    assert out["key"] == "0123abcd" and out["api_key_env"] == "MY_API_KEY"
    assert out["base_url_env"] == "COA_TEACHER_BASE_URL"
    assert out["max_total_tokens"] == 1536 and out["prompt_tokens"] == 12
    assert out["api_key"] == out["auth_token"] == out["password"] == "***"
    assert out["note"] == "called with ***"  # a secret value is scrubbed wherever it appears


def test_lineage_keeps_the_artifact_key(tmp_path: object) -> None:
    store = io.Store(str(tmp_path))
    writer = store.writer("tasks", "unit", {"api_key_env": "X", "max_tokens": 4})
    writer.write_file("a.txt", "a")
    ref = writer.commit()
    lineage = io.read_lineage(ref)
    assert lineage["key"] == ref.key and lineage["config"] == {"api_key_env": "X", "max_tokens": 4}


def test_s3_requests_are_retried_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from coa.errors import UserError
    from coa.settings import Settings

    monkeypatch.setenv("COA_S3_MAX_ATTEMPTS", "7")
    monkeypatch.delenv("COA_S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    options = Settings.from_env().storage_options("s3://bucket/store")
    assert options == {"config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": 7}}}
    assert Settings.from_env().storage_options("/tmp/store") == {}
    monkeypatch.setenv("COA_S3_MAX_ATTEMPTS", "often")
    with pytest.raises(UserError, match="COA_S3_MAX_ATTEMPTS must be a whole number"):
        Settings.from_env()


def test_only_a_storage_client_error_reads_as_a_failing_store() -> None:
    from botocore.exceptions import ClientError

    reply = {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503, "RetryAttempts": 4}}
    try:
        try:
            raise ClientError(reply, "PutObject")  # type: ignore[arg-type]
        except ClientError as e:
            raise OSError(16, "Please reduce your request rate.") from e  # as s3fs translates it
    except OSError as e:
        assert io.storage_failure(e) == "SlowDown (HTTP 503) after 5 attempts"
    assert io.storage_failure(OSError(5, "Input/output error")) is None
    assert io.storage_failure(ConnectionError("teacher endpoint down")) is None
