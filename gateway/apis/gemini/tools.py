"""Gemini's `tools` and `toolConfig` as chat function tools and `tool_choice`.

tools[].functionDeclarations [{name, description, parameters | parametersJsonSchema}]
    -> {"type": "function", "function": {name, description, parameters}} (parameters:
       schema.json_schema; parametersJsonSchema as it is)
tools[].googleSearch, codeExecution, urlContext, ... -> dropped, listed as `tools[i]:<kind>`:
    hosted tools, which model_rules' hosted_tools rule drops or refuses
toolConfig.functionCallingConfig mode AUTO | VALIDATED | ANY | NONE -> tool_choice auto | auto |
    required (with one allowed name: that function) | none; allowedFunctionNames keeps only
    those functions
"""

from __future__ import annotations

from typing import Any

from gateway.apis.gemini.fields import camel, get
from gateway.apis.gemini.schema import json_schema
from gateway.proxy.translation.body import field_error
from gateway.proxy.translation.ignored import Dropped

_MODES = {"AUTO": "auto", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto", "ANY": "required", "NONE": "none"}


def functions(tools: Any, dropped: Dropped) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise field_error("tools", "must be a list")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise field_error(where, "must be an object")
        for kind, value in tool.items():
            if camel(kind) != "functionDeclarations":
                # googleSearch, codeExecution, urlContext...: run by Google's servers, not a worker.
                dropped.add(where, camel(kind))
                continue
            if not isinstance(value, list):
                raise field_error(f"{where}.functionDeclarations", "must be a list")
            for j, declaration in enumerate(value):
                out.append(_function(declaration, f"{where}.functionDeclarations[{j}]"))
    return out


def _function(declaration: Any, param: str) -> dict[str, Any]:
    if not isinstance(declaration, dict):
        raise field_error(param, "must be an object")
    name, description = declaration.get("name"), declaration.get("description")
    if not isinstance(name, str) or not name:
        raise field_error(f"{param}.name", "must be a non-empty string")
    function: dict[str, Any] = {"name": name}
    if description is not None:
        if not isinstance(description, str):
            raise field_error(f"{param}.description", "must be a string")
        function["description"] = description
    given = get(declaration, "parametersJsonSchema")
    if given is not None:
        if not isinstance(given, dict):
            raise field_error(f"{param}.parametersJsonSchema", "must be an object")
        function["parameters"] = given
    elif declaration.get("parameters") is not None:
        function["parameters"] = json_schema(declaration["parameters"], f"{param}.parameters")
    else:
        function["parameters"] = {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def tool_config(
    config: Any, functions: list[dict[str, Any]], chat: dict[str, Any], dropped: Dropped
) -> list[dict[str, Any]]:
    if not isinstance(config, dict):
        raise field_error("toolConfig", "must be an object")
    for name in config:
        if camel(name) != "functionCallingConfig":
            dropped.add(f"toolConfig.{camel(name)}")
    calling = get(config, "functionCallingConfig")
    if calling is None:
        return functions
    if not isinstance(calling, dict):
        raise field_error("toolConfig.functionCallingConfig", "must be an object")
    mode = calling.get("mode", "AUTO")
    if not isinstance(mode, str) or mode.upper() not in _MODES:
        raise field_error("toolConfig.functionCallingConfig.mode", "must be AUTO, ANY, NONE or VALIDATED")
    allowed = get(calling, "allowedFunctionNames")
    if allowed is not None:
        if not isinstance(allowed, list) or not all(isinstance(n, str) for n in allowed):
            raise field_error(
                "toolConfig.functionCallingConfig.allowedFunctionNames", "must be a list of names"
            )
        functions = [f for f in functions if f["function"]["name"] in allowed]
    choice: Any = _MODES[mode.upper()]
    if choice == "required" and allowed is not None and len(allowed) == 1:
        choice = {"type": "function", "function": {"name": allowed[0]}}
    if functions or choice == "none":
        chat["tool_choice"] = choice
    return functions
