"""What a translation dropped from a client's request, made visible instead of silent.

A translated request is served even when it carries fields, tools or content the worker's chat
contract has no equivalent for ("tolerant to shapes"); each such part is named once in the call's
`ignored`, e.g. ("output_config", "tools[8]:web_search", "messages[3].content[1]:document").
The pipeline (one place) then:

    x-sluicegate-ignored: output_config,tools[8]:web_search    on the answer, success or error
    sluicegate_ignored_fields_total{api, field}                 field: `label()`, a bounded set
    one debug log line

Header values are sanitised and bounded: the names come from the client's body.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

from gateway.http.context import RequestContext
from gateway.observability.metrics import Metrics
from gateway.proxy.translation.engine_fields import DROPPED_FIELDS

IGNORED_HEADER = "x-sluicegate-ignored"
_MAX_ENTRY = 64
_MAX_HEADER = 512
_INDEX = re.compile(r"\[\d+\]")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:\[\]-]")

log = logging.getLogger("sluicegate.translation")

# The label values the counter may carry: known names (indexes taken out), else "<kind>:other"
# for a tool, block or item type, else "other". Client-chosen names never become a label. A tool's
# known types are the hosted tools the client APIs declare (gateway.apis: `hosted_tools`), handed
# to `label` by the pipeline.
_FIELDS = frozenset(
    {
        "output_config",
        "context_management",
        "container",
        "mcp_servers",
        "service_tier",
        "inference_geo",
        "include",
        "client_metadata",
        "reasoning.summary",
        "truncation",
        "prompt",
        "safety_identifier",
        "top_logprobs",
        "max_tool_calls",
        "stream_options",
        *DROPPED_FIELDS,  # vLLM's extras an OpenAI body's allow-list dropped
    }
)
_BLOCK_TYPES = frozenset(
    {
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
        "input_file",
        "input_audio",
        "image",
    }
)
_ITEM_TYPES = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction",
    }
)
_KINDS = {
    "messages.content": _BLOCK_TYPES,
    "input": _ITEM_TYPES,
    "input.content": _BLOCK_TYPES,
}


def entry(where: str, kind: object = None) -> str:
    """One ignored entry: `where` (a field path with indexes), with the dropped type if any."""
    if kind is None:
        return _safe(where)
    return _safe(f"{where}:{kind if isinstance(kind, str) else 'untyped'}")


def _safe(text: str) -> str:
    return _UNSAFE.sub("?", text)[:_MAX_ENTRY]


def label(ignored: str, hosted: frozenset[str] = frozenset()) -> str:
    """The counter's `field` value for one entry, from a bounded set. `hosted`: the hosted tool
    types the client APIs declare (gateway.apis: their `hosted_tools`), a dropped tool's known
    types."""
    generic = _INDEX.sub("", ignored)
    if generic in _FIELDS:
        return generic
    where, _, kind = generic.partition(":")
    known = hosted if where == "tools" else _KINDS.get(where)
    if known is None:
        return "other"
    return f"{where}:{kind if kind in known else 'other'}"


def header_value(ignored: Iterable[str]) -> str:
    """The entries, comma-separated, cut at a bound (then `,...` says more were left out)."""
    out: list[str] = []
    size = 0
    for name in ignored:
        name = _safe(name)
        if size + len(name) + 1 > _MAX_HEADER:
            out.append("...")
            break
        out.append(name)
        size += len(name) + 1
    return ",".join(out)


def hosted_tools(ignored: Iterable[str]) -> list[str]:
    """The entries that are tools the worker cannot run (`tools[i]:<type>`)."""
    return [name for name in ignored if name.startswith("tools[")]


class Dropped:
    """Collects a translation's entries, each once, in the order met."""

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: dict[str, None] = {}

    def add(self, where: str, kind: object = None) -> None:
        self._names[entry(where, kind)] = None

    def fields(self, body: dict[str, object], handled: frozenset[str]) -> None:
        """Every top-level field of `body` the translation does not handle."""
        for name in body:
            if name not in handled:
                self.add(name)

    def done(self) -> tuple[str, ...]:
        return tuple(self._names)


def record(
    ctx: RequestContext,
    api: str,
    ignored: tuple[str, ...],
    metrics: Metrics,
    hosted: frozenset[str] = frozenset(),
) -> None:
    """Counted and logged once per request; the header reads `ctx.ignored` (`announcing`)."""
    ctx.ignored = ignored
    if not ignored:
        return
    for name in ignored:
        metrics.child(metrics.ignored_fields, api, label(name, hosted)).inc()
    log.debug("request %s: the translation dropped %s", ctx.request_id, header_value(ignored))


def header(ignored: tuple[str, ...]) -> tuple[bytes, bytes]:
    """x-sluicegate-ignored as a raw header: the one middleware (gateway/edge/middleware.py) adds
    it to the start of any answer to a request whose translation dropped something (`ctx.ignored`),
    so no route wraps `send` for it."""
    return IGNORED_HEADER.encode(), header_value(ignored).encode()
