"""create_app(settings, table): the whole gateway as one Starlette app, built without globals.

Middleware order (outermost first): Starlette's ServerErrorMiddleware (a bug becomes a 500
envelope), RequestContextMiddleware (request id, access log, request metrics), then the router
with its exception handlers that map every GatewayError to its status and envelope once
(gateway/edge/handlers.py). The operator's endpoints are gateway/edge/probes.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from gateway import __version__
from gateway.admin.audit import AuditLog
from gateway.admin.audit_store import AuditStore
from gateway.admin.batch_routes import batch_routes
from gateway.admin.deps import AdminDeps
from gateway.admin.models import admin_model_routes
from gateway.admin.role_routes import role_routes
from gateway.admin.routes import admin_routes
from gateway.apis import APIS, ClientApi
from gateway.apis.batch import LINE_DIALECTS
from gateway.apis.endpoint import mount
from gateway.batch.batchstore import BatchStore
from gateway.batch.filestore import FileStore
from gateway.batch.service import BatchService
from gateway.config import Settings
from gateway.console.console_store import ConsoleStore
from gateway.console.routes import console_mount
from gateway.console.session import Sessions
from gateway.discovery.kubernetes import start_discovery
from gateway.drain import Drain
from gateway.edge import handlers, openapi, planes, probes
from gateway.edge.home import home_route
from gateway.edge.key_info import KeyInfoDeps, key_info
from gateway.edge.middleware import RequestContextMiddleware
from gateway.errors import GatewayError
from gateway.http.networks import trusted_networks
from gateway.identity.binding_store import BindingStore
from gateway.identity.directory import SCIM_TOMBSTONE_TTL_S, Directory
from gateway.keys.auth import Authenticator
from gateway.keys.credentials import secret_headers
from gateway.keys.store import KeyStore
from gateway.limits.limit_store import LimitStore
from gateway.limits.limiter import RateLimiter
from gateway.limits.peek import LimitReader
from gateway.metering.budget_gauge import BudgetGauge
from gateway.metering.budget_store import BudgetStore
from gateway.metering.meter import Meter
from gateway.metering.spool import Spool
from gateway.metering.usage_store import UsageStore
from gateway.model_table import ModelTable
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import Tracing
from gateway.overflow.call import OverflowCall
from gateway.overflow.providers import Overflow
from gateway.proxy.cache_salt import CacheSalts
from gateway.proxy.forwarding import Forwarding
from gateway.proxy.gate import Gate
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.request_limits import RequestLimits
from gateway.proxy.upstream import Upstream
from gateway.redis import keys as redis_keys
from gateway.redis.breaker import RedisBreaker
from gateway.redis.client import close_redis, connect_redis, learn_topology
from gateway.redis.health import Readiness, watch_redis
from gateway.redis.shared_secret import SharedSecret
from gateway.routing.holder_store import HolderStore
from gateway.routing.monitor import Monitor
from gateway.routing.prefix_share import PrefixShare
from gateway.routing.prefix_store import PrefixStore
from gateway.routing.router import Router
from gateway.routing.stored_responses import StoredResponses
from gateway.routing.vtc_store import FairShareStore
from gateway.scim.routes import scim_mount
from gateway.scim.store import ScimStore
from gateway.state import AppState
from gateway.stores import Stores
from gateway.worker.client import WorkerClient


def create_app(
    settings: Settings,
    table: ModelTable,
    *,
    registry: CollectorRegistry | None = None,
    rng: random.Random | None = None,
    drain: Drain | None = None,
    apis: tuple[ClientApi, ...] = APIS,
    stores: Stores | None = None,
) -> Starlette:
    """`drain`: the shutdown state the server that runs this app sets (gateway.drain); the app
    keeps it as `app.state.drain`. `apis`: the client APIs it serves (gateway.apis), each one's
    declarations handed down here to the layers that need them. `stores`: any the app takes in
    place of its Redis ones (gateway/stores.py)."""
    drain = drain or Drain()
    stores = stores or Stores()
    metrics = Metrics(registry)
    router = Router(table, metrics, rng=rng, prefix_index_blocks=settings.prefix_index_blocks)
    # The models' external providers: a key that cannot be read stops the start here.
    overflow = Overflow(table, metrics, rng=rng)
    # Every API's credential places, each taken on every client route; and never forwarded.
    credentials = tuple(dict.fromkeys(c for api in apis for c in api.credentials))
    forwarding = Forwarding(
        trusted_networks(settings.trusted_proxies),
        never_forward=secret_headers(credentials) | {h for api in apis for h in api.never_forward},
    )
    operations = {dialect: op for api in apis for dialect, op in api.operations.items()}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[AppState]:
        # None unless an OTLP endpoint is set: then nothing of the SDK exists (tracing.py).
        tracing = (
            None
            if settings.tracing is None
            else Tracing(settings.tracing, version=__version__, operations=operations)
        )
        redis = connect_redis(settings)
        await learn_topology(redis, settings.redis_timeout_s)
        workers = WorkerClient()  # every call to a worker: the requests', probes, scrapes
        # app.py holds the client only to build the stores (one per concern, docs/architecture.md)
        # and close it: everything else reaches Redis through them.
        # A failed call opens it for one Redis timeout: then one request probes again.
        breaker = RedisBreaker(cool_down_s=settings.redis_timeout_s)
        keystore = KeyStore(redis, breaker=breaker)  # the breaker: its look-ups on the request path
        stored = StoredResponses(
            stores.holders or HolderStore(redis, timeout_s=settings.redis_timeout_s),
            ttl_s=settings.stored_response_ttl_s,
        )
        meter = Meter(stores.usage or UsageStore(redis, timeout_s=settings.redis_timeout_s), metrics)
        spool = Spool(settings.spool_path)
        meter.start(spool)
        upstream = Upstream(workers, router, metrics)
        overflow.attach(workers)
        auth = Authenticator(
            keystore,
            cache_ttl_s=settings.key_cache_ttl_s,
            timeout_s=settings.redis_timeout_s,
            credentials=credentials,
        )
        limiter = RateLimiter(
            stores.admission or LimitStore(redis, breaker, timeout_s=settings.redis_timeout_s),
            metrics,
            meter,
            fail_open=settings.redis_fail_open,
            lease_s=settings.concurrency_lease_s,
        )
        gate = Gate(auth, router, RequestLimits(limiter, meter, metrics))
        pipeline = Pipeline(
            settings=settings,
            gate=gate,
            limiter=limiter,
            router=router,
            upstream=upstream,
            forwarding=forwarding,
            meter=meter,
            metrics=metrics,
            stored=stored,
            drain=drain,
            salts=CacheSalts(
                SharedSecret(
                    redis,
                    redis_keys.CACHE_SALT_SECRET,
                    settings.cache_salt_secret,
                    timeout_s=settings.redis_timeout_s,
                )
            ),
            hosted_tools=frozenset(tool for api in apis for tool in api.hosted_tools),
            body_lists={dialect: api.body_lists for api in apis for dialect in api.operations},
            overflow=(overflow, OverflowCall(workers, metrics)) if overflow else None,
        )
        audit = AuditLog(AuditStore(redis, max_entries=settings.audit_max_entries))
        console_store = ConsoleStore(redis)
        admin = AdminDeps(
            settings=settings,
            keystore=keystore,
            auth=auth,
            meter=meter,
            router=router,
            audit=audit,
            bindings=BindingStore(redis),
            sessions=Sessions(
                console_store,
                SharedSecret(
                    redis,
                    redis_keys.CONSOLE_SESSION_SECRET,
                    settings.session_secret,
                    timeout_s=settings.redis_timeout_s,
                ),
                ttl_s=settings.console_session_ttl_s,
                trusted=trusted_networks(settings.trusted_proxies),
                public_https=(settings.public_url or "").startswith("https://"),
            ),
            directory=Directory(
                None
                if settings.scim_token is None
                else ScimStore(
                    redis, tombstone_ttl_s=max(SCIM_TOMBSTONE_TTL_S, settings.console_session_ttl_s)
                )
            ),
        )
        invalidations = asyncio.ensure_future(auth.follow_invalidations())
        # Token fair share: every replica charges and reads the same counters (routing/vtc.py),
        # over connections of its own, so its batches never hold one the request path waits for.
        share_redis = connect_redis(settings)
        await learn_topology(share_redis, settings.redis_timeout_s)
        router.attach_fair_share(
            FairShareStore(share_redis, breaker, metrics, timeout_s=settings.redis_timeout_s)
        )
        # Confirms discovered endpoints, probes /health, scrapes load: stopped before the worker
        # client closes (with the upstream).
        monitor = Monitor(router, workers)
        monitor.start()
        prefix_share = None
        if settings.prefix_share_interval_s > 0:
            prefix_share = PrefixShare(
                PrefixStore(redis),
                router.prefix_index,
                metrics,
                interval_s=settings.prefix_share_interval_s,
                timeout_s=settings.redis_timeout_s,
                active=router.has_prefix_pools,
                endpoints=router.prefix_endpoints,
            )
            router.prefix_sink = prefix_share.note
            prefix_share.start()
        # Pools from Kubernetes fill in the background; None when the table names no Service.
        discovery = await start_discovery(settings, table, router)
        if discovery is None:
            metrics.discovery_up.set(1)
        else:
            metrics.discovery_up.set_function(lambda: 1.0 if discovery.in_sync() else 0.0)
        redis_watch = asyncio.ensure_future(
            watch_redis(redis, metrics.redis_up, timeout_s=settings.redis_timeout_s)
        )
        budget_gauge = BudgetGauge(
            BudgetStore(redis),
            keystore,
            metrics.registry,
            interval_s=settings.budget_export_interval_s,
            timeout_s=settings.redis_timeout_s,
        )
        budget_gauge.start()
        # The Files and Batch API (gateway/batch/): only with a file store to keep its bytes.
        batch = (
            None
            if settings.files_url is None
            else BatchService(
                settings,
                files=FileStore(redis, retention_s=settings.files_retention_s),
                batches=BatchStore(redis, retention_s=settings.files_retention_s),
                router=router,
                keystore=keystore,
                pipeline=pipeline,
                dialects=LINE_DIALECTS,
                metrics=metrics,
            )
        )
        state = AppState(
            settings=settings,
            pipeline=pipeline,
            gate=gate,
            admin=admin,
            router=router,
            readiness=Readiness(redis),
            console_store=console_store,
            key_info=KeyInfoDeps(
                LimitReader(LimitStore(redis, timeout_s=settings.redis_timeout_s)),
                meter,
                timeout_s=settings.redis_timeout_s,
            ),
            stored=stored,
            upstream=upstream,
            tracing=tracing,
            batch=batch,
        )
        if batch is not None:
            batch.start(state)
        try:
            yield state
        finally:
            if batch is not None:
                await batch.close()
            if discovery is not None:
                await discovery.stop()
            await monitor.stop()
            await budget_gauge.stop()
            await asyncio.gather(*router.attach_fair_share(None), return_exceptions=True)
            await close_redis(share_redis)
            if prefix_share is not None:
                router.prefix_sink = None
                await prefix_share.stop()
            for task in (invalidations, redis_watch):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await limiter.aclose()  # after the drain: nothing runs that holds a slot
            await meter.stop(spool)
            await upstream.aclose()
            await close_redis(redis)
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # flushes: blocking, so off the loop

    # With an admin port, the client routes answer on the client listener only and the admin ones
    # on the admin listener only (gateway/edge/planes.py).
    routes = planes.place(
        client=[
            # Each client API's routes, in the order of `apis` (gateway.apis.spec: route precedence).
            *(route for api in apis for route in mount(api)),
            Route("/v1/key/info", key_info, methods=["GET"]),
            openapi.route([api.openapi for api in apis]),
        ],
        admin=[
            *admin_routes(),
            *admin_model_routes(),
            *role_routes(),
            *batch_routes(),
            # The IdP's provisioning (SCIM 2.0, gateway/scim/): its own token, its own envelope.
            scim_mount(),
            # The web admin console under /admin/ui/ (gateway/console/): the same store and rules.
            console_mount(settings),
            Route("/metrics", probes.metrics_endpoint(settings, metrics), methods=["GET"]),
        ],
        both=[
            home_route(settings.admin_port, {name: path for api in apis for name, path in api.home.items()}),
            Route("/healthz", probes.healthz, methods=["GET"]),
            Route("/readyz", probes.readyz(settings, drain, router), methods=["GET"]),
        ],
        admin_port=settings.admin_port,
    )
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                RequestContextMiddleware,
                metrics=metrics,
                drain=drain,
                forwarding=forwarding,
                # The client APIs' paths, and the key's own (gateway/edge/key_info.py).
                api_paths=(*(prefix for api in apis for prefix in api.paths), "/v1/key/info"),
                encoded_paths=tuple(prefix for api in apis for prefix in api.encoded_paths),
                model_readers=tuple(api.model_in_path for api in apis if api.model_in_path is not None),
            ),
        ],
        exception_handlers={
            GatewayError: handlers.gateway_error,
            HTTPException: handlers.http_error(
                tuple(api.unknown_routes for api in apis if api.unknown_routes is not None)
            ),
            Exception: handlers.unexpected_error,
        },
        lifespan=lifespan,
    )
    # No slash redirects: Starlette builds their Location from the client's Host header (an open
    # redirect to any host); `/admin/v1/teams/` is a 404 like any other path that is not a route.
    app.router.redirect_slashes = False
    app.state.drain = drain
    return app


__all__ = ["create_app"]
