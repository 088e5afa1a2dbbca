"""Tests of coa.llm against a fake OpenAI-compatible server."""
