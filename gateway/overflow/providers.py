"""The overflow providers as this replica holds them: each one's key, TLS trust, and a one-endpoint
`Pool` that is its concurrency bound and its breaker.

Why a Pool: it already is what a provider needs. Its endpoint takes at most `max_inflight` requests
(the overflow's `max_concurrency`, across this replica), and the health rules
(gateway/routing/health.py) eject it after `failures_to_eject` failures in a row for a backoff
that doubles (`ejection_base` to `ejection_max`), then let one trial request through: a circuit
breaker, open while ejected, half-open on its trial. A provider's 429 or quota, 5xx, redirect or
garbage counts as its own failure (any team's request ejects it: `teams_to_eject` 1), so a failing
provider is left alone instead of retried into a storm. Its pool is never in the router: no
request reaches it but through gateway/overflow/call.py, and no probe or scrape is sent to it.
"""

from __future__ import annotations

import dataclasses
import os
import random
import ssl
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

from gateway.errors import ConfigError
from gateway.model_table import ModelConfig, ModelTable, PoolConfig, RoutingConfig
from gateway.observability.metrics import Metrics
from gateway.overflow.config import OverflowConfig, ProviderConfig
from gateway.pricing import Price
from gateway.routing.endpoint import Endpoint
from gateway.routing.health import ENDPOINT_FAILED, SERVED
from gateway.routing.pool import Pool
from gateway.worker.client import WorkerClient

SERVED_BY_PREFIX = "overflow:"
_MAX_KEY_BYTES = 4096


class Provider:
    """One provider of one model. `served_by` is what the client, the access log and the usage
    report are told (`overflow:<name>`); `label` the metric's (`<model>/<name>`)."""

    def __init__(
        self,
        model: ModelConfig,
        overflow: OverflowConfig,
        config: ProviderConfig,
        key: str,
        metrics: Metrics,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.name = config.name
        self.url = config.url
        self.price = config.price
        self.served_by = SERVED_BY_PREFIX + config.name
        self.label = f"{model.name}/{config.name}"
        self._key = key
        self.rng = rng
        self._clock = clock
        # The provider as a pool of one endpoint: the model's timeouts, the provider's model name,
        # none of the engine extras (`continuous_usage_stats` is vLLM's).
        provider_model = dataclasses.replace(
            model,
            upstream_model=config.model,
            endpoints=(config.url,),
            kubernetes=None,
            pools=(),
            fallbacks=(),
            continuous_usage=False,
            routing=RoutingConfig(
                policy="least_outstanding",
                max_inflight_per_endpoint=overflow.max_concurrency,
                max_queue=1,
                fairness="requests",
            ),
            health=dataclasses.replace(model.health, teams_to_eject=1),
            overflow=None,
        )
        self.pool = Pool(
            provider_model,
            PoolConfig(name=self.label, endpoints=(config.url,)),
            metrics,
            rng=rng,
            clock=clock,
        )
        self.endpoint: Endpoint = self.pool.endpoints[0]

    def __repr__(self) -> str:  # never the key
        return f"Provider({self.label})"

    def headers(self) -> dict[str, str]:
        """The only headers a provider gets: nothing of the client's, the team's or the gateway's."""
        return {
            "authorization": f"Bearer {self._key}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }

    def available(self) -> bool:
        """Under its concurrency and its breaker closed (or its trial due: half-open)."""
        endpoint = self.endpoint
        if endpoint.usable:
            return endpoint.inflight < self.pool.max_inflight
        return endpoint.trial_ready(self._clock())

    def failed(self, *, trial: bool) -> None:
        """Its answer turned out bad after its head (garbage, broken off): one failure on its
        breaker (`trial`: the request was its half-open trial, which re-opens it)."""
        self.pool.report(self.endpoint, ENDPOINT_FAILED, trial=trial)

    def served(self, *, trial: bool) -> None:
        """Its whole answer was an answer: the failures in a row start over (a trial closes it)."""
        self.pool.report(self.endpoint, SERVED, trial=trial)

    def retry_after_s(self) -> float | None:
        return self.pool.next_chance_s()

    def close(self) -> None:
        self.pool.close()


@dataclasses.dataclass(frozen=True, slots=True)
class ModelOverflow:
    """One model's overflow: when (after_s) and to whom, in the model file's order."""

    model: str
    after_s: float
    providers: tuple[Provider, ...]
    # What admission reserves money at when the request may overflow: the higher of the model's
    # and every provider's price, per token kind.
    ceiling: Price

    def available(self) -> Provider | None:
        for provider in self.providers:
            if provider.available():
                return provider
        return None


class Overflow:
    """Every model's overflow providers, built once at start from the model table; a provider
    whose key cannot be read, or whose CA file is not one, stops the start with a ConfigError
    naming the field."""

    def __init__(
        self,
        table: ModelTable,
        metrics: Metrics,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        rng = rng or random.Random()
        self._models: dict[str, ModelOverflow] = {}
        self._contexts: dict[str, ssl.SSLContext] = {}  # per provider URL with a ca_file
        for i, model in enumerate(table.models):
            overflow = model.overflow
            if overflow is None:
                continue
            providers = []
            for j, config in enumerate(overflow.providers):
                where = f"models[{i}].overflow.providers[{j}]"
                key = _key(config, where, env)
                if config.ca_file is not None:
                    try:
                        self._contexts[config.url] = ssl.create_default_context(cafile=config.ca_file)
                    except (OSError, ssl.SSLError) as exc:
                        why = exc.strerror or type(exc).__name__
                        raise ConfigError(f"{where}.ca_file: cannot load CA certificates: {why}") from None
                providers.append(Provider(model, overflow, config, key, metrics, rng, clock))
            self._models[model.name] = ModelOverflow(
                model.name, overflow.after_ms / 1000, tuple(providers), _ceiling(model.price, providers)
            )

    def attach(self, client: WorkerClient) -> None:
        """The app's worker client verifies each provider with a `ca_file` against that alone."""
        for url, context in self._contexts.items():
            client.trust(url, context)

    def of(self, model: str) -> ModelOverflow | None:
        return self._models.get(model)

    def __bool__(self) -> bool:
        return bool(self._models)

    def close(self) -> None:
        for overflow in self._models.values():
            for provider in overflow.providers:
                provider.close()


def _key(config: ProviderConfig, where: str, env: Mapping[str, str]) -> str:
    if config.key_env is not None:
        key = env.get(config.key_env, "").strip()
        if not key:
            raise ConfigError(f"{where}.key_env: the environment variable {config.key_env} is not set")
        field = "key_env"
    else:
        assert config.key_file is not None
        try:
            key = Path(config.key_file).read_text(encoding="utf-8")[:_MAX_KEY_BYTES].strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}.key_file: cannot read the key: {type(exc).__name__}") from None
        if not key:
            raise ConfigError(f"{where}.key_file: the file is empty")
        field = "key_file"
    if not key.isascii() or not key.isprintable():
        # It goes into a header line: a line break would be a header of its own.
        raise ConfigError(f"{where}.{field}: the key must be printable ASCII on one line")
    return key


def _ceiling(model_price: Price | None, providers: list[Provider]) -> Price:
    prices = [p.price for p in providers] + ([model_price] if model_price is not None else [])
    return Price(
        input_per_million=max((p.input_per_million for p in prices), default=Decimal(0)),
        output_per_million=max((p.output_per_million for p in prices), default=Decimal(0)),
        currency=prices[0].currency,
    )
