"""An event loop of its own in a thread, for a server a test runs beside it: a synchronous test and an asyncio test
drive it alike, and a test's blocking waits do not stall it.

    with LoopThread("my-server") as thread:
        thread.call(server.start())
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        """Run `coroutine` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def __enter__(self) -> LoopThread:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
