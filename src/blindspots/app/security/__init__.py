"""Who may ask what: sign-in and roles (`auth`), the outer guard of every request (`guard`: hosts,
per-route body limits, headers) and the count of failed sign-ins per address (`throttle`)."""
from blindspots.app.security.auth import (CSRF_HEADER, SESSION_COOKIE, NeedsSignIn, Principal, client_address,
                                          identify, page_admin, page_user, refuse_unknown_token, require_admin,
                                          require_user)
from blindspots.app.security.guard import Guard, host_set
from blindspots.app.security.throttle import SignInThrottle

__all__ = ["CSRF_HEADER", "SESSION_COOKIE", "Guard", "NeedsSignIn", "Principal", "SignInThrottle", "client_address",
           "host_set", "identify", "page_admin", "page_user", "refuse_unknown_token", "require_admin", "require_user"]
