"""The agent snippets' text (gateway/agent_snippets.py) without an agent: docs/agents.md shows what
the source renders, the model each key gets, and an unknown context window said, not guessed."""

from __future__ import annotations

from pathlib import Path

from gateway.agent_snippets import DOC_BEGIN, DOC_END, AgentSnippets, docs_block, pick_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
TABLE = [("llama", ("default",)), ("qwen", ()), ("mistral", ("mixtral",))]


def test_docs_agents_md_shows_what_the_one_source_renders() -> None:
    text = DOC.read_text()
    shown = text[text.index(DOC_BEGIN) : text.index(DOC_END) + len(DOC_END)]
    assert shown == docs_block(), "paste gateway.agent_snippets.docs_block() into docs/agents.md"


def test_each_key_gets_a_model_it_may_use() -> None:
    assert pick_model(TABLE, None) == ("llama", True)  # every model: the table's first
    assert pick_model(TABLE, ["mistral", "qwen"]) == ("qwen", False)  # the table's order
    assert pick_model(TABLE, ["mixtral"]) == ("mixtral", False)  # by the name the key was given


def test_an_unknown_window_is_said_not_guessed() -> None:
    unknown = AgentSnippets("http://gw", "sk-1", "qwen", None, any_model=False)
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in unknown.claude_code()
    assert "model_context_window" not in unknown.codex_profile()
    assert any("does not know qwen's context window" in note for note in unknown.notes())
    known = AgentSnippets("http://gw", "sk-1", "qwen", "32768", any_model=True)
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768 claude" in known.claude_code()
    assert "model_context_window = 32768\n" in known.codex_profile()
    assert not any("context window" in note for note in known.notes())
    assert any("the key may use any" in note for note in known.notes())
