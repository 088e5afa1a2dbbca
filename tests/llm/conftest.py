"""Fixtures of the LLM-layer tests: one fake OpenAI-compatible server per session, reset per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.llm.fake_server import FakeLLMServer


@pytest.fixture(scope="session")
def _fake_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake(_fake_server: FakeLLMServer) -> Iterator[FakeLLMServer]:
    """The fake server with an empty script and no recorded requests."""
    _fake_server.reset()
    yield _fake_server
    _fake_server.reset()
