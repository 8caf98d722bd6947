"""Which labelled Services autodiscovery believes.

A Service labelled `sluicegate.io/model` claims names that clients send prompts to (its model and
its aliases) and, by its weight, a share of that model's traffic. Anyone allowed to create a
Service in a watched namespace could otherwise register a pool for another team's model with a
huge weight and receive that team's prompts. So:

- each name may be claimed only from the namespaces listed for it in
  SLUICEGATE_KUBERNETES_MODEL_NAMESPACES (`model=ns1,ns2;team-a/*=team-a`; an exact name wins
  over a pattern, a longer `prefix*` over a shorter, `*` alone matches every name);
- a name with no entry may be claimed only from the gateway's own namespace: whoever can create
  Services there can usually change the gateway's own Deployment anyway, and a single-namespace
  install (the default) keeps working unchanged;
- a weight above SLUICEGATE_KUBERNETES_MAX_WEIGHT refuses the Service rather than clamping it, so
  the owner sees a log line instead of a quietly different traffic split.

Names in the config file are never claimable at all (autodiscovery.build_models).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gateway.errors import ConfigError
from gateway.model_table import MODEL_NAME_RE

MODEL_NAMESPACES_VAR = "SLUICEGATE_KUBERNETES_MODEL_NAMESPACES"
MAX_WEIGHT_VAR = "SLUICEGATE_KUBERNETES_MAX_WEIGHT"
DEFAULT_MAX_WEIGHT = 100.0

_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# (model name or `prefix*` pattern, the namespaces that may serve it)
ModelNamespaces = tuple[tuple[str, tuple[str, ...]], ...]


def parse_model_namespaces(raw: str) -> ModelNamespaces:
    """`model=ns1,ns2;prefix*=ns3`; a ConfigError naming the variable on anything else."""
    entries: list[tuple[str, tuple[str, ...]]] = []
    for part in (p.strip() for p in raw.split(";")):
        if not part:
            continue
        name, sep, rest = (s.strip() for s in part.partition("="))
        if not sep:
            raise ConfigError(f"{MODEL_NAMESPACES_VAR}: expected model=namespace[,namespace], got {part!r}")
        stem = name[:-1] if name.endswith("*") else name
        if stem and not MODEL_NAME_RE.fullmatch(stem):
            raise ConfigError(f"{MODEL_NAMESPACES_VAR}: not a model name or prefix* pattern: {name!r}")
        if not name:
            raise ConfigError(f"{MODEL_NAMESPACES_VAR}: no model name before '=' in {part!r}")
        if any(name == seen for seen, _ in entries):
            raise ConfigError(f"{MODEL_NAMESPACES_VAR}: {name!r} is listed twice")
        namespaces = tuple(n.strip() for n in rest.split(",") if n.strip())
        if not namespaces:
            raise ConfigError(f"{MODEL_NAMESPACES_VAR}: {name!r} lists no namespace")
        for namespace in namespaces:
            if not _NAMESPACE_RE.fullmatch(namespace):
                raise ConfigError(f"{MODEL_NAMESPACES_VAR}: not a namespace name: {namespace!r}")
        entries.append((name, namespaces))
    return tuple(entries)


def parse_max_weight(raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_WEIGHT
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{MAX_WEIGHT_VAR}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{MAX_WEIGHT_VAR}: must be a positive number, got {raw!r}")
    return value


@dataclass(frozen=True)
class ServiceTrust:
    own_namespace: str
    model_namespaces: ModelNamespaces = ()
    max_weight: float = DEFAULT_MAX_WEIGHT

    def allowed_namespaces(self, name: str) -> tuple[str, ...]:
        best: tuple[str, tuple[str, ...]] | None = None
        for pattern, namespaces in self.model_namespaces:
            if pattern == name:
                return namespaces
            longer = best is None or len(pattern) > len(best[0])
            if pattern.endswith("*") and name.startswith(pattern[:-1]) and longer:
                best = (pattern, namespaces)
        return best[1] if best is not None else (self.own_namespace,)

    def refusal(self, namespace: str, names: Sequence[str], weight: float) -> str | None:
        """Why a Service in `namespace` claiming `names` (model first) with `weight` is not
        believed; None when it is."""
        for index, name in enumerate(names):
            allowed = self.allowed_namespaces(name)
            if namespace not in allowed:
                kind = "model" if index == 0 else "alias"
                return (
                    f"{kind} {name!r} may be served only from namespace {', '.join(allowed)} "
                    f"(set {MODEL_NAMESPACES_VAR} to allow others)"
                )
        if weight > self.max_weight:
            return (
                f"annotation sluicegate.io/weight {weight:g} is above {MAX_WEIGHT_VAR} ({self.max_weight:g})"
            )
        return None

    def start_warnings(self, watched: Collection[str]) -> list[str]:
        """Settings that silently hide Services: said once when autodiscovery starts."""
        listed = {n for _, namespaces in self.model_namespaces for n in namespaces}
        warnings: list[str] = []
        unlisted = sorted(n for n in watched if n != self.own_namespace and n not in listed)
        if unlisted:
            warnings.append(
                f"namespace {', '.join(unlisted)} is watched but no {MODEL_NAMESPACES_VAR} entry names it: "
                "its labelled Services are ignored"
            )
        unwatched = sorted(listed - set(watched))
        if unwatched:
            warnings.append(
                f"{MODEL_NAMESPACES_VAR} names namespace {', '.join(unwatched)}, which is not watched "
                "(SLUICEGATE_KUBERNETES_NAMESPACES)"
            )
        return warnings
