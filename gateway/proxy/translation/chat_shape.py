"""System messages where chat templates accept them: one, leading.

Agents put instructions in several places: Anthropic's `system` and `role: "system"` messages
anywhere in `messages` (Claude Code sends one after the first user turn); Responses'
`instructions` and `developer` / `system` items (Codex sends two). Many chat templates (Mistral's,
Gemma's) allow one leading system message only, so every translated request is normalised here:

    system messages before the first user/assistant turn   -> ONE leading system message
    a later system message                                  -> folded IN PLACE into the adjacent
        user turn: the next user message if one comes before the next assistant turn (its text
        first), else the user message just before it (its text last), else a user message of its
        own at that place (after any tool results that follow it)

A later system message never joins the leading one: that would change the prompt's prefix on
every turn and lose the engine's prefix cache. `fold_chat` works on chat messages, `fold_messages`
on an Anthropic Messages body (for a native pool with `native_normalise`), where tool results sit
inside user messages and must stay first in them.
"""

from __future__ import annotations

from typing import Any

_JOIN = "\n\n"


def fold_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages (roles system, user, assistant, tool) with their system messages folded."""
    first = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
    leading = [_chat_text(m.get("content")) for m in messages[:first]]
    out: list[dict[str, Any]] = []
    if any(leading):
        out.append({"role": "system", "content": _JOIN.join(t for t in leading if t)})
    pending: list[str] = []  # later system text waiting for its user turn
    for message in messages[first:]:
        role = message.get("role")
        if role == "system":
            text = _chat_text(message.get("content"))
            if text:
                pending.append(text)
            continue
        if pending and role == "user":
            message = {**message, "content": _chat_join(pending, message.get("content"), first=True)}
            pending = []
        elif pending and role != "tool":  # an assistant turn: the text belongs before it
            _chat_place(out, pending)
            pending = []
        out.append(message)
    if pending:
        _chat_place(out, pending)
    return out


def _chat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _chat_join(texts: list[str], content: Any, *, first: bool) -> Any:
    """A user message's content with `texts` before (first) or after it, in the content's own shape."""
    if isinstance(content, list):
        parts = [{"type": "text", "text": t} for t in texts]
        return [*parts, *content] if first else [*content, *parts]
    given = [content] if isinstance(content, str) and content else []
    return _JOIN.join([*texts, *given] if first else [*given, *texts])


def _chat_place(out: list[dict[str, Any]], texts: list[str]) -> None:
    """Later system text with no user turn after it: into the user message just before, else its own."""
    last = out[-1] if out else None
    if last is not None and last.get("role") == "user":
        out[-1] = {**last, "content": _chat_join(texts, last.get("content"), first=False)}
    else:
        out.append({"role": "user", "content": _JOIN.join(texts)})


# --- an Anthropic Messages body ------------------------------------------------------------------


def fold_messages(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """An Anthropic body with its `role: "system"` messages folded (blocks kept, `cache_control`
    and all); True when anything changed."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not any(_is_system(m) for m in messages):
        return body, False
    first = next((i for i, m in enumerate(messages) if not _is_system(m)), len(messages))
    system = _blocks(body.get("system"))
    for message in messages[:first]:
        system.extend(_blocks(message.get("content")))
    out: list[Any] = []
    pending: list[dict[str, Any]] = []
    for message in messages[first:]:
        if _is_system(message):
            pending.extend(_blocks(message.get("content")))
            continue
        role = message.get("role") if isinstance(message, dict) else None
        if pending and role == "user":
            message = {**message, "content": _after_results(_blocks(message.get("content")), pending)}
            pending = []
        elif pending:
            _place(out, pending)
            pending = []
        out.append(message)
    if pending:
        _place(out, pending)
    folded = {**body, "messages": out}
    if system:
        folded["system"] = system
    return folded, True


def _is_system(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "system"


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A string or a block list as a list of blocks (a string becomes one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _after_results(blocks: list[dict[str, Any]], added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`added` before a user message's own content, after its tool results (which come first)."""
    split = next((i for i, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks))
    return [*blocks[:split], *added, *blocks[split:]]


def _place(out: list[Any], added: list[dict[str, Any]]) -> None:
    last = out[-1] if out else None
    if isinstance(last, dict) and last.get("role") == "user":
        out[-1] = {**last, "content": [*_blocks(last.get("content")), *added]}
    else:
        out.append({"role": "user", "content": added})
