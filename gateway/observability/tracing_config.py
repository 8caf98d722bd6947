"""What tracing is asked to do, read once at start from the environment (Settings.from_env).

Tracing is on when an OTLP endpoint is set. Which requests it records is a sampler's choice:

- The default (no OTEL_TRACES_SAMPLER) is `parentbased_traceidratio` at SLUICEGATE_TRACE_SAMPLE_RATIO
  (DEFAULT_SAMPLE_RATIO when unset): a request whose client sent a `traceparent` follows the
  client's decision, sampled or not; a request that starts a trace is recorded with that
  probability, decided by its trace id (so every service that samples by ratio agrees on it).
  Recording every request costs about a fifth of a request's instructions, the default about
  3-5 % (docs/tracing-and-logs.md has the measured numbers).
- OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, the standard variables, name any of the SDK's
  built-in samplers instead (`always_on` records everything). Setting it beside
  SLUICEGATE_TRACE_SAMPLE_RATIO stops the start: one of the two would be silently ignored.

Nothing here imports the SDK: with tracing off, it is never loaded (tracing.py).
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import ConfigError

SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)
DEFAULT_SAMPLER = "parentbased_traceidratio"
# One request in twenty that starts its own trace: enough to see every route and most limits
# within minutes at a few requests per second, at a cost measured under 5 % of a request's CPU.
DEFAULT_SAMPLE_RATIO = 0.05


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """What the OTEL_* variables ask for. The exporter's own variables (OTEL_EXPORTER_OTLP_HEADERS,
    _CERTIFICATE, _COMPRESSION, _TIMEOUT and their _TRACES_ forms) are read by the SDK itself: the
    headers often hold a collector's credentials, which the gateway's settings never copy."""

    endpoint: str  # the full URL spans are POSTed to
    service_name: str = "sluicegate"
    sampler: str = DEFAULT_SAMPLER
    sampler_arg: float = DEFAULT_SAMPLE_RATIO  # the ratio of a *traceidratio sampler
    max_queue_size: int = 2048
    schedule_delay_ms: float = 5000.0
    max_export_batch_size: int = 512
    export_timeout_ms: float = 30000.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TracingConfig | None:
        """None (tracing off) unless an OTLP endpoint is set; a value the SDK would reject, or a
        protocol the gateway does not speak, stops the start naming the variable."""
        defaults = cls(endpoint="")
        if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
            return None
        exporter = (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
        if exporter == "none":
            return None
        if exporter != "otlp":
            raise ConfigError(f"OTEL_TRACES_EXPORTER: only otlp (or none) is supported, got {exporter!r}")
        traces = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
        base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
        if not traces and not base:
            return None
        name = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" if traces else "OTEL_EXPORTER_OTLP_ENDPOINT"
        # As the spec says: the signal's own endpoint is used as is, the base gets /v1/traces.
        endpoint = traces or base.rstrip("/") + "/v1/traces"
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{name}: expected an http:// or https:// URL, got {endpoint!r}")
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = (env.get(variable) or "").strip().lower()
            if protocol:
                break
        if protocol not in ("", "http/protobuf"):
            raise ConfigError(
                f"{variable}: the gateway exports OTLP over HTTP only (http/protobuf, usually port "
                f"4318; collectors serve it beside gRPC), got {protocol!r}"
            )
        sampler, ratio = _sampler(env)
        queue = _number(env, "OTEL_BSP_MAX_QUEUE_SIZE", defaults.max_queue_size, int)
        batch = _number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaults.max_export_batch_size, int)
        if batch > queue:
            raise ConfigError(
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE: at most OTEL_BSP_MAX_QUEUE_SIZE ({queue}), got {batch}"
            )
        return cls(
            endpoint=endpoint,
            service_name=(env.get("OTEL_SERVICE_NAME") or "").strip() or defaults.service_name,
            sampler=sampler,
            sampler_arg=ratio,
            max_queue_size=queue,
            schedule_delay_ms=_number(env, "OTEL_BSP_SCHEDULE_DELAY", defaults.schedule_delay_ms, float),
            max_export_batch_size=batch,
            export_timeout_ms=_number(env, "OTEL_BSP_EXPORT_TIMEOUT", defaults.export_timeout_ms, float),
        )


def _sampler(env: Mapping[str, str]) -> tuple[str, float]:
    """(sampler, ratio): the standard variables when OTEL_TRACES_SAMPLER is set, else the
    documented default at SLUICEGATE_TRACE_SAMPLE_RATIO."""
    named = (env.get("OTEL_TRACES_SAMPLER") or "").strip().lower()
    own = (env.get("SLUICEGATE_TRACE_SAMPLE_RATIO") or "").strip()
    if named and own:
        raise ConfigError(
            "SLUICEGATE_TRACE_SAMPLE_RATIO: set it or OTEL_TRACES_SAMPLER (with OTEL_TRACES_SAMPLER_ARG), "
            "not both"
        )
    if not named:
        ratio = _number(env, "SLUICEGATE_TRACE_SAMPLE_RATIO", DEFAULT_SAMPLE_RATIO, float)
        if ratio > 1.0:
            raise ConfigError(f"SLUICEGATE_TRACE_SAMPLE_RATIO: a ratio from 0 to 1, got {own!r}")
        return DEFAULT_SAMPLER, ratio
    if named not in SAMPLERS:
        raise ConfigError(f"OTEL_TRACES_SAMPLER: one of {', '.join(sorted(SAMPLERS))}, got {named!r}")
    # The specification's default argument of a ratio sampler named without one is 1.0.
    ratio = _number(env, "OTEL_TRACES_SAMPLER_ARG", 1.0, float)
    if "ratio" in named and not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1, got {ratio!r}")
    return named, ratio


def _number(env: Mapping[str, str], name: str, default: Any, cast: type[int] | type[float]) -> Any:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and cast is int):
        raise ConfigError(f"{name}: out of range, got {raw!r}")
    return value
