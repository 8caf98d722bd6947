"""`sluicegate serve`, `check-config` and `demo`: the commands that run a gateway."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging

from gateway.config import Settings
from gateway.errors import ConfigError
from gateway.model_file import load_model_table
from gateway.model_table import ModelTable

log = logging.getLogger("sluicegate.serve")


def load_table(settings: Settings, path: str | None = None) -> ModelTable:
    path = path or settings.config_path
    if not path:
        raise ConfigError("SLUICEGATE_CONFIG: set it to the path of the model table (YAML)")
    return load_model_table(path)


def cmd_serve(args: argparse.Namespace) -> int:
    from uvicorn.config import STARTUP_FAILURE

    from gateway.app import create_app
    from gateway.edge.draining import DrainingServer
    from gateway.edge.server import listen_sockets, uvicorn_config
    from gateway.observability.logs import configure_logging

    settings = Settings.from_env()
    table = load_table(settings)
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings, table)
    # What is built by now (every module, the app, the model table) lives as long as the process:
    # frozen out of the collector's generations, so no full collection walks those ~60,000
    # objects again (milliseconds each time). Here, not in the app: tests build many apps in one
    # process, whose garbage must stay collectable.
    gc.collect()
    gc.freeze()
    server = DrainingServer(
        uvicorn_config(app, settings),
        app.state.drain,
        shutdown_delay_s=settings.shutdown_delay_s,
        drain_timeout_s=settings.drain_timeout_s,
    )
    sockets = None
    if settings.admin_port is not None:
        try:
            sockets = listen_sockets(settings)
        except OSError as exc:
            log.error("cannot listen on ports %d and %d: %s", settings.port, settings.admin_port, exc)
            return STARTUP_FAILURE
        log.info(
            "listening on %s port %d (client APIs) and port %d (admin API, console, /metrics)",
            settings.host,
            settings.port,
            settings.admin_port,
        )
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    # As uvicorn.run: a gateway that never started (port taken, failed startup) is a failure.
    return 0 if server.started else STARTUP_FAILURE


def cmd_check_config(args: argparse.Namespace) -> int:
    table = load_table(Settings.from_env(), args.path)
    names = ", ".join(m.name for m in table.models) or "none"
    print(f"ok: {len(table.models)} model(s): {names}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.dev.demo import run_demo

    return run_demo(host=args.host, port=args.port, state=args.state)
