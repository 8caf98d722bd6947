"""The model table: which names clients may send, and where and how each one is served.

Read once at start from its YAML file (gateway/model_file.py), which checks every field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gateway.overflow.config import OverflowConfig
from gateway.pricing import Price

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")

FAIRNESS_MODES = ("tokens", "requests")
POLICY_NAMES = ("least_outstanding", "least_loaded", "session_affinity", "prefix_affinity")
# How a model's workers take each client API besides OpenAI's own: translated to the chat contract
# (every worker), or forwarded as it is to workers that serve it themselves (vLLM does both).
TRANSLATE, NATIVE = "translate", "native"
NATIVE_APIS = ("messages", "responses")


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `first_token` covers connect-to-first-output of a stream, `idle` the gap between
    its outputs (comments and role-only deltas are not output), `stream_total` a whole stream from
    the worker's head; `total` bounds a non-streaming answer, which arrives only when generation
    has finished."""

    connect: float = 2.0
    first_token: float = 60.0
    idle: float = 30.0
    total: float = 600.0
    stream_total: float = 3600.0


@dataclass(frozen=True)
class KubernetesTarget:
    """A Service whose EndpointSlices are the pool's endpoints."""

    service: str
    namespace: str | None = None  # None: the namespace the gateway runs in
    port: str | int = "http"  # a port name or number of the Service's EndpointSlices


@dataclass(frozen=True)
class PoolConfig:
    """One set of interchangeable endpoints. A model has one pool, or several with weights (a
    canary split). `upstream_model` overrides the model's own for this pool."""

    name: str
    weight: float = 1.0
    endpoints: tuple[str, ...] = ()
    kubernetes: KubernetesTarget | None = None
    upstream_model: str | None = None


@dataclass(frozen=True)
class PrefixConfig:
    """prefix_affinity's settings (gateway/routing/prefix.py; docs/prefix-routing.md)."""

    # Bytes of rendered prompt per hashed block: ~4 bytes a token, so 512 is ~128 tokens.
    block_bytes: int = 512
    # How much more loaded (scraped waiting x4 + running + KV use, plus this replica's in-flight)
    # than the least loaded endpoint the best-cached one may be and still get the request.
    # Measured default: the sweep in bench/prefix_routing_bench.py.
    max_extra_load: float = 8.0


@dataclass(frozen=True)
class RoutingConfig:
    policy: str = "least_outstanding"
    # Past this many requests in flight on an endpoint (from this replica), requests wait in the
    # pool's fair queue instead of piling onto a saturated worker.
    max_inflight_per_endpoint: int = 256
    max_queue: int = 1024
    max_queue_wait: float = 30.0
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    # How a saturated pool's queue shares it between teams: "tokens", by weighted tokens served
    # with counters shared by every replica (gateway/routing/vtc.py), or "requests", by request
    # count per replica (gateway/routing/fairqueue.py). docs/routing.md, "Fair share".
    fairness: str = "tokens"
    # Batch lines (gateway/batch/engine.py) start on a pool only while its requests in flight are
    # below this share of its slots (and nothing waits): the rest stays for interactive requests.
    batch_share: float = 0.5


@dataclass(frozen=True)
class HealthConfig:
    failures_to_eject: int = 3  # consecutive failures (see gateway.routing.health for which count)
    # Distinct teams whose requests must be among those failures when every one of them was a 5xx
    # or a timeout, which one team can provoke with its own requests (1: any team alone ejects).
    teams_to_eject: int = 2
    ejection_base: float = 2.0  # seconds; doubles with each ejection in a row
    ejection_max: float = 60.0
    probe_interval: float = 5.0  # active GET /health, and the load scrape of least_loaded


@dataclass(frozen=True)
class Protocols:
    """Per client API, `translate` or `native` (gateway.proxy.translation.native)."""

    messages: str = TRANSLATE
    responses: str = TRANSLATE

    def native(self, api: str) -> bool:
        return api in NATIVE_APIS and getattr(self, api) == NATIVE


@dataclass(frozen=True)
class ModelConfig:
    name: str
    endpoints: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    upstream_model: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    kubernetes: KubernetesTarget | None = None
    pools: tuple[PoolConfig, ...] = ()
    fallbacks: tuple[str, ...] = ()
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    # The workers put cumulative usage on every streamed chunk when asked (CONTRACT.md SSE-10):
    # a client that leaves mid-stream is then metered by the worker's own count.
    continuous_usage: bool = True
    protocols: Protocols = field(default_factory=Protocols)
    # The workers serve vLLM's `POST /tokenize`: Anthropic's count_tokens asks them, not the estimate.
    tokenize: bool = False
    # Hosted tools a translated request names (web_search, code_interpreter, ...): the worker runs
    # none of them. `drop` serves the request without them (said in x-sluicegate-ignored);
    # `refuse` answers 400 instead, for a team that would rather know.
    hosted_tools: str = "drop"
    # Native pools: apply the translation's normalisation to the forwarded body too (a later
    # system message folded into a user turn; Responses namespace tools flattened, hosted tools
    # dropped), for engines or chat templates that refuse those shapes.
    native_normalise: bool = False
    # Output caps (gateway/limits/output.py): the most one answer may generate; the model's
    # context (None: the smallest `max_model_len` its workers report in /v1/models); the cap of a
    # request that sets none (None: SLUICEGATE_DEFAULT_MAX_TOKENS).
    max_output_tokens: int | None = None
    context_window: int | None = None
    default_max_tokens: int | None = None
    # What a million prompt and completion tokens cost (gateway/pricing.py): the usage report's
    # cost, recorded with each request at the prices in force then; None: its usage costs nothing.
    price: Price | None = None
    # Who shares the engines' prefix cache (gateway/proxy/cache_salt.py): `team` (the default),
    # `key`, or `shared` (every team: for prompts that are public).
    cache_isolation: str = "team"
    # An OpenAI body's fields beyond the API's own that reach the workers, by name (`min_p`,
    # `guided_json`): every other one is dropped or refused (gateway.proxy.translation.engine_fields).
    engine_fields: frozenset[str] = frozenset()
    # The most logprobs a request may ask for per token (`top_logprobs`, completions' `logprobs`,
    # `prompt_logprobs`): each is engine work and answer bytes for every token.
    max_logprobs: int = 5
    # The workers run vLLM with `--scheduling-policy priority`: a background (batch) request's
    # worker body then carries a positive `priority`, so interactive requests (0) overtake it in
    # the engine's queue (gateway/proxy/translation/engine_priority.py). Off by default: vLLM
    # refuses a non-zero priority from a server without that policy.
    engine_priority: bool = False
    # External OpenAI-compatible providers that serve it when its pools and fallbacks cannot in
    # time, for teams that allow it (gateway/overflow/, docs/overflow.md); None: never.
    overflow: OverflowConfig | None = None

    @property
    def wire_model(self) -> str:
        return self.upstream_model or self.name

    def pool_configs(self) -> tuple[PoolConfig, ...]:
        """The weighted pools; `endpoints` / `kubernetes` are shorthand for one pool."""
        if self.pools:
            return self.pools
        return (PoolConfig(name=self.name, endpoints=self.endpoints, kubernetes=self.kubernetes),)


@dataclass(frozen=True)
class ModelTable:
    models: tuple[ModelConfig, ...]

    def by_name(self) -> dict[str, ModelConfig]:
        """Every name a client may send (names and aliases) mapped to its model."""
        table: dict[str, ModelConfig] = {}
        for model in self.models:
            for name in (model.name, *model.aliases):
                table[name] = model
        return table
