"""Small routers, one per page, each with its JSON endpoints under /api; `bodies.Body` is the base of
their JSON bodies."""
