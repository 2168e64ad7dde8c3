"""Sign-in throttling: failed sign-ins and unknown bearer tokens counted per client address.

Why: an unthrottled sign-in accepted 1,500 guesses at hundreds per second with no trace. Each
failure is logged (address, count); once an address has `limit` failures within `window`
seconds, its *failed* attempts answer 429 with Retry-After (instead of 401) until the oldest
failure leaves the window, and further failures keep it there. A success neither clears the
count nor is held back by it: a request with a valid token or session is always served.

The trade-off (docs/app.md, "Security"): annotators usually share one address
(a lab's NAT or proxy), so refusing everything from a throttled address would let one
misbehaving client lock out every colleague behind it. Serving valid tokens means the throttle no
longer caps how fast someone can *test* guesses (a guess is still answered valid or not); that is
acceptable because tokens are long random secrets (`blindspots annotators add` makes 192-bit
ones): guessing one is not the threat this guard must stop at the price of locking out a lab. What
it still does: tells a broken or hostile client to back off, and keeps every failure in the log
(one line per failure under the limit, then one line per address and window). In memory, per
process: a restart forgets (acceptable for a lab server).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque

log = logging.getLogger(__name__)
MAX_ADDRESSES = 10_000  # bound on remembered addresses (a spread-out attack): the stalest go first


class SignInThrottle:
    """Failed sign-ins per client address. limit: failures allowed per `window` seconds."""

    def __init__(self, limit: int = 10, window: float = 60.0, clock=time.monotonic) -> None:  # noqa: ANN001
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit: expected an int >= 1, got {limit!r}")
        if not window > 0:
            raise ValueError(f"window: expected seconds > 0, got {window!r}")
        self.limit, self.window, self.clock = limit, float(window), clock
        # the last `limit` failure times per address: enough to know when the oldest leaves the window
        self._fails: dict[str, deque[float]] = {}
        self._logged_refusal: dict[str, float] = {}  # when a refusal of the address was last logged
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        q = self._fails.get(client)
        if q is None:
            return deque(maxlen=self.limit)
        while q and q[0] <= now - self.window:
            q.popleft()
        if not q:
            del self._fails[client]
            self._logged_refusal.pop(client, None)
        return q

    def _wait(self, q: deque[float], now: float) -> int:
        return 0 if len(q) < self.limit else max(1, math.ceil(q[0] + self.window - now))

    def retry_after(self, client: str) -> int:
        """Seconds until a failed attempt of `client` is answered 401 again instead of 429 (0: now)."""
        with self._lock:
            now = self.clock()
            return self._wait(self._recent(client, now), now)

    def failed(self, client: str) -> int:
        """Record (and log) one failed sign-in of `client`. Returns 0 when the address was still under
        the limit (answer 401), else the seconds it stays over it (answer 429, Retry-After)."""
        with self._lock:
            now = self.clock()
            q = self._recent(client, now)
            wait = self._wait(q, now)
            q.append(now)
            self._fails[client] = q
            n = len(q)
            if len(self._fails) > MAX_ADDRESSES:
                stale = min(self._fails, key=lambda c: self._fails[c][-1])
                del self._fails[stale]
                self._logged_refusal.pop(stale, None)
            say = not wait or now - self._logged_refusal.get(client, -math.inf) >= self.window
            if wait and say:
                self._logged_refusal[client] = now
        if not wait:
            log.warning("failed sign-in from %s (%d in the last %.0f s)", client, n, self.window)
        elif say:  # one line per address and window while it stays over the limit (no log flood)
            log.warning("failed sign-in from %s: over %d in the last %.0f s, its failed attempts are refused for "
                        "%d s (valid tokens are still served); further refusals are not logged this window",
                        client, self.limit, self.window, wait)
        return wait

