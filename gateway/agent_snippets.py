"""The coding-agent set-ups the gateway hands out, from one place: the demo banner, the console's
new-key page and docs/agents.md (rendered with placeholders; a test keeps the doc in step) all
print these texts, and tests/agents runs them as printed with the real agents.

Each names a model the key may use (agents otherwise ask for their vendor's default name and get a
404) and, where the gateway knows it, the model's context window: Claude Code otherwise assumes 1M
tokens and Codex its own fallback. Where the window is unknown the text says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The Codex profile's name: `codex -p sluicegate` reads $CODEX_HOME/sluicegate.config.toml, which
# leaves the user's own config.toml as it is.
CODEX_PROFILE = "sluicegate"
CODEX_KEY_VARIABLE = "SLUICEGATE_API_KEY"
DOC_BEGIN = "<!-- snippets:begin -->"
DOC_END = "<!-- snippets:end -->"


@dataclass(frozen=True)
class AgentSnippets:
    base: str  # the gateway's root, no /v1
    key: str
    model: str
    window: str | None  # the model's context window in tokens; None: the gateway does not know it
    any_model: bool  # the key may use every model: `model` is only the table's first

    def claude_code(self) -> str:
        """One shell line (continued with backslashes): Claude Code wants the root, no /v1."""
        window = f"CLAUDE_CODE_MAX_CONTEXT_TOKENS={self.window} " if self.window else ""
        return (
            f"ANTHROPIC_BASE_URL={self.base} ANTHROPIC_AUTH_TOKEN={self.key} \\\n"
            f"  ANTHROPIC_MODEL={self.model} ANTHROPIC_DEFAULT_HAIKU_MODEL={self.model} \\\n"
            f"  {window}claude"
        )

    def codex_file(self) -> str:
        return f"~/.codex/{CODEX_PROFILE}.config.toml"

    def codex_command(self) -> str:
        return f"{CODEX_KEY_VARIABLE}={self.key} codex -p {CODEX_PROFILE}"

    def codex_profile(self) -> str:
        """Codex speaks only the Responses API. `model_context_window` caps its window (Codex 0.171
        still warns that it has no metadata for a model outside its own catalog: harmless)."""
        window = f"model_context_window = {self.window}\n" if self.window else ""
        return (
            f'model = "{self.model}"\n'
            f'model_provider = "{CODEX_PROFILE}"\n'
            f"{window}"
            "\n"
            f"[model_providers.{CODEX_PROFILE}]\n"
            'name = "Sluicegate"\n'
            f'base_url = "{self.base}/v1"\n'
            f'env_key = "{CODEX_KEY_VARIABLE}"\n'
            'wire_api = "responses"\n'
        )

    def openai_python(self) -> str:
        return f'from openai import OpenAI\nclient = OpenAI(base_url="{self.base}/v1", api_key="{self.key}")'

    def notes(self) -> list[str]:
        """What a user must know to use the texts above: which model, which window."""
        notes = []
        if self.any_model:
            notes.append(
                f"{self.model} is the first model of the gateway's table; the key may use any: put "
                "another model's name in place of it (ANTHROPIC_MODEL and the profile's model)."
            )
        if self.window is None:
            notes.append(
                f"The gateway does not know {self.model}'s context window: set "
                "CLAUDE_CODE_MAX_CONTEXT_TOKENS (Claude Code otherwise assumes 1M tokens) and "
                "model_context_window (Codex) to it."
            )
        notes.append(
            "Codex warns that it has no metadata for a model outside its own catalog "
            '("Model metadata for ... not found"): harmless, its window is model_context_window.'
        )
        return notes


def pick_model(table: Sequence[tuple[str, Sequence[str]]], allowed: Iterable[str] | None) -> tuple[str, bool]:
    """(model, whether the key may use every model): the first model of the table (name, aliases)
    the key may use, by the name the key was given; for a key allowed every model, the first."""
    if allowed is None:
        return table[0][0], True
    names = set(allowed)
    for name, aliases in table:
        usable = [n for n in (name, *aliases) if n in names]
        if usable:
            return usable[0], False
    return sorted(names)[0], False  # a name no longer in the table: still the key's own


def docs_block() -> str:
    """docs/agents.md's Claude Code and Codex set-ups, with placeholders."""
    snippets = AgentSnippets("GATEWAY", "KEY", "MODEL", "CONTEXT", any_model=False)
    return (
        f"{DOC_BEGIN}\n"
        "```sh\n"
        f"{snippets.claude_code()}\n"
        "```\n\n"
        f"Codex CLI: save this as `{snippets.codex_file()}` (or `$CODEX_HOME/...`), then run "
        f"`{snippets.codex_command()}`. A profile leaves your own `config.toml` as it is.\n\n"
        "```toml\n"
        f"{snippets.codex_profile()}"
        "```\n"
        f"{DOC_END}"
    )
