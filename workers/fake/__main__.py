"""`python -m workers.fake --host 127.0.0.1 --port 8001 --model NAME [--model NAME2 ...]`."""

from __future__ import annotations

import argparse
import importlib.util
import logging

import uvicorn

from workers.fake.aborts import HideInjectedAborts
from workers.fake.app import create_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers.fake", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="a model name to serve (repeatable; default: fake-model)",
    )
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        create_app(args.models or ["fake-model"]),
        host=args.host,
        port=args.port,
        http="httptools",
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        access_log=False,
        log_level="warning",
    )
    # After Config, which (re)configures uvicorn's loggers: aborts injected by x-fake-fail-after
    # are the point of the request, not server errors worth a traceback.
    logging.getLogger("uvicorn.error").addFilter(HideInjectedAborts())
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
