"""A chat-completions server that enforces a request limit the way providers do: once `limit`
requests were accepted in the last `window` seconds, it refuses with 429 and `Retry-After`.

Used by the quota tests (tests/test_quotas.py) and the quota benchmark (benchmarks/quota.py)::

    with limited_server(limit=10, window=10.0) as limited:
        ...  # point OpenAIChatModel at limited.server.base_url
    limited.answered, limited.refused
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .openai_server import ErrorReply, FakeOpenAIServer, Reply, TextReply

__all__ = ["LimitedServer", "limited_server"]


class LimitedServer:
    """Answers with `answer(body)` while fewer than `limit` requests were accepted in the last
    `window` seconds; refuses the others with a 429 whose Retry-After is `retry_after`, or,
    when that is None, the whole seconds until the oldest accepted request leaves the window
    (as providers' reset headers say)."""

    def __init__(
        self,
        server: FakeOpenAIServer,
        *,
        limit: int = 10,
        window: float = 10.0,
        retry_after: float | None = 4.0,
        answer: Callable[[dict[str, Any]], Reply] | None = None,
        replies: int = 2_000,
    ) -> None:
        self.server, self.limit, self.window, self.retry_after = server, limit, window, retry_after
        self.answer = answer or (lambda body: TextReply("fine"))
        self.accepted: collections.deque[float] = collections.deque()
        self.accepted_all: list[float] = []
        self.refused = 0
        self.answered = 0
        self.lock = threading.Lock()
        server.enqueue(*[self.reply for _ in range(replies)])

    def reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            now = time.monotonic()
            while self.accepted and self.accepted[0] <= now - self.window:
                self.accepted.popleft()
            if len(self.accepted) >= self.limit:
                self.refused += 1
                wait = self.retry_after
                if wait is None:
                    wait = max(1, math.ceil(self.accepted[0] + self.window - now))
                return ErrorReply.rate_limit(wait)
            self.accepted.append(now)
            self.accepted_all.append(now)
            self.answered += 1
        return self.answer(body)

    def max_in_any_window(self, times: list[float]) -> int:
        return max(sum(1 for t in times if start <= t < start + self.window) for start in times)


@contextmanager
def limited_server(**options: Any) -> Iterator[LimitedServer]:
    """A `FakeOpenAIServer` (API key `sk-test`) answering through a `LimitedServer`."""
    with FakeOpenAIServer(api_key="sk-test") as server:
        yield LimitedServer(server, **options)
