"""Sign-in throttling: at most `limit` failed sign-ins per client address in a sliding window.

Why: tokens are long and random, but an unthrottled sign-in accepted 1,500 guesses at hundreds
per second with no trace. Each failure is logged (address, count); once an address has `limit`
failures within `window` seconds, its sign-ins answer 429 with Retry-After until the oldest
failure leaves the window. A success does not clear the count (a guesser with one valid token
must not reset it). In memory, per process: a restart forgets (acceptable for a lab server).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque

log = logging.getLogger(__name__)


class SignInThrottle:
    """Failed sign-ins per client address. limit: failures allowed per `window` seconds."""

    def __init__(self, limit: int = 10, window: float = 60.0, clock=time.monotonic) -> None:  # noqa: ANN001
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: expected an int >= 1, got {limit!r}")
        if not window > 0:
            raise ValueError(f"window: expected seconds > 0, got {window!r}")
        self.limit, self.window, self.clock = limit, float(window), clock
        self._fails: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        q = self._fails.get(client)
        if q is None:
            return deque()
        while q and q[0] <= now - self.window:
            q.popleft()
        if not q:
            del self._fails[client]
        return q

    def retry_after(self, client: str) -> int:
        """Seconds until `client` may try again (0: allowed now)."""
        with self._lock:
            now = self.clock()
            q = self._recent(client, now)
            if len(q) < self.limit:
                return 0
            return max(1, math.ceil(q[0] + self.window - now))

    def failed(self, client: str) -> None:
        """Record (and log) one failed sign-in of `client`."""
        with self._lock:
            now = self.clock()
            q = self._recent(client, now)
            q.append(now)
            self._fails[client] = q
            n = len(q)
            if len(self._fails) > 10000:  # bound memory under a spread-out attack: forget the stalest
                stale = min(self._fails, key=lambda c: self._fails[c][-1])
                del self._fails[stale]
        log.warning("failed sign-in from %s (%d in the last %.0f s)", client, n, self.window)


def throttle_of(request) -> SignInThrottle:  # noqa: ANN001 - a starlette Request
    """The app's throttle (`create_app` puts one on `app.state`)."""
    return request.app.state.throttle
