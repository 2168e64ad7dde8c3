"""A switch for answer POSTs in browser tests: pass, cut (network down) or refuse, installed before the page loads."""
from __future__ import annotations

import re


class Network:
    """What happens to answer POSTs matching `pattern` (a regex on the URL): they pass (`mode` None), are
    aborted as if the network were down ("cut"), or get `refusal` (status, JSON body) ("refuse").

    It is installed on the context before the first page loads and switched with `set`: a route
    added to a loaded page once let the next POST through (seen under load with Chromium)."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.pattern = ""
        self.refusal: tuple[int, str] = (409, "{}")

    def __call__(self, route) -> None:  # noqa: ANN001
        req = route.request
        if self.mode is None or req.method != "POST" or not re.search(self.pattern, req.url):
            route.continue_()
        elif self.mode == "cut":
            route.abort("internetdisconnected")
        else:
            route.fulfill(status=self.refusal[0], content_type="application/json", body=self.refusal[1])

    def set(self, mode: str | None, pattern: str = "") -> None:
        self.mode, self.pattern = mode, pattern
