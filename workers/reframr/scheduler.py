"""One generation at a time per engine, a bounded FIFO of waiting requests, and the engine thread.

Reframr is CPU-bound and not re-entrant, so:

- `Slot` (event-loop thread only) admits a request synchronously, before any response byte, so a
  full worker answers 429 at once: one request holds the slot, at most `max_queue` wait in FIFO
  order. A waiter whose client leaves is removed from the queue and never reaches the engine.
- `start` runs the engine on a single-thread executor, so the event loop stays responsive. The
  slot is released by the engine thread's completion, not by the request's coroutine: a client
  that leaves mid-generation cannot let a second generation start while the first still runs.
- Pieces cross from the engine thread to the loop with `call_soon_threadsafe`. `Generation.stop()`
  sets an Event the engine thread checks before asking a `TokenStreamer` for its next token, so a
  token engine stops within one token; `generate_text` cannot be interrupted, and its result is
  dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from workers.reframr.engine import Engine, Job, TokenStreamer, generate_text, iter_tokens


class Ticket:
    """A request's place: granted (holds the slot) or waiting; `done` once given back."""

    __slots__ = ("done", "granted", "handed_off")

    def __init__(self, granted: asyncio.Future[None]) -> None:
        self.granted = granted
        self.handed_off = False
        """The engine thread owns the slot now and releases it when it finishes."""
        self.done = False


class Slot:
    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self.running = 0
        self._queue: deque[Ticket] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def admit(self) -> Ticket | None:
        """A ticket, or None when the queue is full."""
        ticket = Ticket(asyncio.get_running_loop().create_future())
        if not self.running and not self._queue:
            self.running = 1
            ticket.granted.set_result(None)
        elif len(self._queue) >= self.max_queue:
            return None
        else:
            self._queue.append(ticket)
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        # Shielded: a cancelled waiter leaves through `abandon`, which keeps the queue consistent.
        await asyncio.shield(ticket.granted)

    def abandon(self, ticket: Ticket) -> None:
        """The request is done with its ticket: leave the queue, or free a slot the engine thread
        was never given. Idempotent; call it in a `finally`."""
        if not ticket.handed_off:
            self.give_back(ticket)

    def give_back(self, ticket: Ticket) -> None:
        if ticket.done:
            return
        ticket.done = True
        if not ticket.granted.done():
            ticket.granted.cancel()
            self._queue.remove(ticket)
            return
        self.running = 0
        if self._queue:
            nxt = self._queue.popleft()
            self.running = 1
            nxt.granted.set_result(None)


_END = object()


class Generation:
    """One engine run, seen from the event loop: `next_piece()` until None."""

    def __init__(self, token_mode: bool) -> None:
        self.token_mode = token_mode
        self.stopping = threading.Event()
        self._items: asyncio.Queue[Any] = asyncio.Queue()

    def stop(self) -> None:
        self.stopping.set()

    async def next_piece(self) -> str | None:
        """The next text piece; None at the end. Re-raises what the engine raised."""
        item = await self._items.get()
        if item is _END:
            self._items.put_nowait(_END)
            return None
        if isinstance(item, BaseException):
            raise item
        text: str = item
        return text


def _drive(engine: Engine, job: Job, gen: Generation, deliver: Callable[[object], None]) -> None:
    """Engine thread: run `job`, handing pieces, the end, or the error to the loop."""
    try:
        if isinstance(engine, TokenStreamer):
            tokens: Iterator[str] = iter_tokens(engine, job)
            try:
                while not gen.stopping.is_set():
                    piece = next(tokens, None)
                    if piece is None:
                        break
                    deliver(piece)
            finally:
                close = getattr(tokens, "close", None)
                if close is not None:
                    close()
        else:
            deliver(generate_text(engine, job))
    except Exception as exc:
        deliver(exc)
    deliver(_END)


class EngineRunner:
    def __init__(self, max_queue: int) -> None:
        self.slot = Slot(max_queue)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reframr-engine")

    def start(self, engine: Engine, job: Job, ticket: Ticket) -> Generation:
        """Run `job` for the holder of `ticket` (granted); the slot is freed when the thread ends."""
        loop = asyncio.get_running_loop()
        gen = Generation(token_mode=isinstance(engine, TokenStreamer))

        def deliver(item: object) -> None:
            try:
                loop.call_soon_threadsafe(gen._items.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is gone, nobody listens
                gen.stop()

        def finished(_: Future[None]) -> None:
            # A closed loop means the server is gone, and the slot with it.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.slot.give_back, ticket)

        running = self.executor.submit(_drive, engine, job, gen, deliver)
        ticket.handed_off = True
        running.add_done_callback(finished)
        return gen

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
