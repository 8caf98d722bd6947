"""`python -m workers.reframr --host H --port P --model-name NAME (--model-dir DIR | --engine test)`.

`--model-dir` serves Reframr's own runtime from a checkout of its model repository (Python >= 3.13);
what can be checked cheaply is checked before the server starts, and a failure exits with status 2
and a message. The weights then load in the background while `/health` answers 503.
`--engine test` serves the deterministic engine (`workers.reframr.deterministic`), token-streaming
with a whitespace tokenizer; `--engine test-buffered` the same behind `generate_text` only, as
Reframr's runtime ships.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from pathlib import Path

import uvicorn

from workers.reframr import runtime
from workers.reframr.app import DEFAULT_MAX_QUEUE, create_app
from workers.reframr.deterministic import DeterministicEngine, TextOnly
from workers.reframr.engine import Engine, EngineLoader


def _engine(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Engine | EngineLoader:
    if args.engine is not None:
        test = DeterministicEngine(answer_tokens=args.answer_tokens, token_delay_s=args.token_delay_ms / 1000)
        return test if args.engine == "test" else TextOnly(test)
    model_dir = Path(args.model_dir)
    try:
        runtime.check(model_dir)
    except runtime.RuntimeUnavailable as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    return EngineLoader(lambda: runtime.load(model_dir), f"Reframr from {model_dir}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m workers.reframr", description="Serve Reframr as a Sluicegate worker."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--model-name", required=True, help="the name clients and the gateway use")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model-dir", help="a checkout of the Reframr model repository")
    source.add_argument("--engine", choices=("test", "test-buffered"), help="a deterministic engine")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE, help="waiting requests")
    parser.add_argument("--max-model-len", type=int, default=None, help="prompt + completion tokens")
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="test engines: time per token")
    parser.add_argument("--answer-tokens", type=int, default=12, help="test engines: answer length")
    args = parser.parse_args(argv)
    if args.max_queue < 0:
        parser.error("--max-queue must be >= 0")
    if args.max_model_len is not None and args.max_model_len < 2:
        parser.error("--max-model-len must be >= 2")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = uvicorn.Config(
        create_app(
            _engine(args, parser), args.model_name, max_queue=args.max_queue, max_model_len=args.max_model_len
        ),
        host=args.host,
        port=args.port,
        http="httptools",
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        access_log=False,
        log_level="warning",
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
