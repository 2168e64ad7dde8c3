"""Small routers, one per page, each with its JSON endpoints under /api."""
