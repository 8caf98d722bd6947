"""Responses `tools`, made servable by a worker: namespaces flattened, hosted tools dropped.

    {"type": "namespace", "name": "multi_agent_v1", "tools": [{"type": "function", "name": "spawn"}]}
        -> {"type": "function", "name": "multi_agent_v1__spawn"}      (Codex sends one)
    {"type": "web_search", ...}, file_search, code_interpreter, ...  -> dropped (`tools[i]:<type>`)

A flat name is `<namespace>__<name>`, made unique against every other tool's name with a `_2`,
`_3`... suffix, and `ToolNames` maps it back: a call of it leaves the gateway as OpenAI writes a
namespaced call (`{"type": "function_call", "name": "spawn", "namespace": "multi_agent_v1"}`), in
whole answers and streams; such a call in the client's input history comes in under the flat name.
Used by the translation (responses_request) and by a native pool with `native_normalise`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.translation.ignored import Dropped

SEPARATOR = "__"


@dataclass(frozen=True, slots=True)
class ToolNames:
    """Flat names of namespaced functions, both ways."""

    back: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat -> (namespace, name)
    forward: dict[tuple[str, str], str] = field(default_factory=dict)

    def flat(self, namespace: str, name: str) -> str:
        """A namespaced call of the client's history under the name the worker knows it by."""
        return self.forward.get((namespace, name), f"{namespace}{SEPARATOR}{name}")

    def original(self, name: str) -> tuple[str, str | None]:
        """(name, namespace) the client knows a worker's call of `name` by."""
        found = self.back.get(name)
        return (name, None) if found is None else (found[1], found[0])

    def item(self, item: dict[str, Any]) -> dict[str, Any]:
        """A function_call output item (whole answer, stream event) with the client's names."""
        name = item.get("name")
        if item.get("type") != "function_call" or not isinstance(name, str) or name not in self.back:
            return item
        inner, namespace = self.original(name)
        return {**item, "name": inner, "namespace": namespace}

    def output(self, items: Any) -> Any:
        """A response's `output` with the client's names (a native worker's answer)."""
        if not isinstance(items, list):
            return items
        return [self.item(i) if isinstance(i, dict) else i for i in items]

    def event(self, chunk: dict[str, Any]) -> bool:
        """A native worker's Responses event renamed in place; True when anything changed."""
        changed = False
        item = chunk.get("item")
        if isinstance(item, dict):
            renamed = self.item(item)
            changed = renamed is not item
            chunk["item"] = renamed
        name = chunk.get("name")
        if chunk.get("type") == "response.function_call_arguments.done" and isinstance(name, str):
            inner, namespace = self.original(name)
            if namespace is not None:
                chunk["name"] = inner
                changed = True
        response = chunk.get("response")
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            output = self.output(response["output"])
            if any(a is not b for a, b in zip(output, response["output"], strict=True)):
                response["output"] = output
                changed = True
        return changed


def _error(param: str, problem: str) -> GatewayError:
    return GatewayError(ErrorCode.INVALID_REQUEST, f"'{param}' {problem}.", param=param)


def flatten(value: Any, dropped: Dropped) -> tuple[list[dict[str, Any]] | None, ToolNames]:
    """Responses `tools` as flat function tools (still in Responses' shape), and their names."""
    if value is None:
        return None, ToolNames()
    if not isinstance(value, list):
        raise _error("tools", "must be a list")
    taken = {
        tool["name"]
        for tool in value
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)
    }
    names = ToolNames()
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict):
            raise _error(param, "must be an object")
        if not isinstance(kind, str):
            raise _error(f"{param}.type", "must be a string")
        if kind == "function":
            out.append(tool)
        elif kind == "namespace":
            namespace = tool.get("name")
            inner = tool.get("tools")
            if not isinstance(namespace, str) or not namespace:
                raise _error(f"{param}.name", "must be a non-empty string")
            if not isinstance(inner, list):
                raise _error(f"{param}.tools", "must be a list")
            for j, function in enumerate(inner):
                where = f"{param}.tools[{j}]"
                if not isinstance(function, dict) or function.get("type") != "function":
                    dropped.add(where, function.get("type") if isinstance(function, dict) else None)
                    continue
                name = function.get("name")
                if not isinstance(name, str) or not name:
                    raise _error(f"{where}.name", "must be a non-empty string")
                flat = _unique(f"{namespace}{SEPARATOR}{name}", taken)
                names.back[flat] = (namespace, name)
                names.forward[(namespace, name)] = flat
                out.append({k: v for k, v in function.items() if k != "defer_loading"} | {"name": flat})
        else:
            dropped.add(param, kind)  # a hosted tool: the worker runs none
    return out, names


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    return candidate


def input_call(item: dict[str, Any], names: ToolNames) -> dict[str, Any]:
    """An input item with its namespaced call under the flat name (and no `namespace` field,
    which a worker's schema may not know)."""
    namespace = item.get("namespace")
    if "namespace" not in item:
        return item
    plain = {k: v for k, v in item.items() if k != "namespace"}
    name = item.get("name")
    if item.get("type") == "function_call" and isinstance(namespace, str) and isinstance(name, str):
        plain["name"] = names.flat(namespace, name)
    return plain
