"""Domain errors of the env server. Domain code raises these; only the routes turn them into HTTP
statuses (`status_of`), and over a WebSocket OpenEnv sends their message as the error."""

from __future__ import annotations


class EnvServerError(Exception):
    """Base: the message says what was wrong with which input and what to do."""


class InvalidRequest(EnvServerError):
    """The request cannot be served as sent (bad field, missing task, limit over a cap)."""


class NotFound(EnvServerError):
    """An id (task, family, episode) that this server does not know."""


class Conflict(EnvServerError):
    """The request clashes with state: an id already in use, an episode already done or not started."""


class Unavailable(EnvServerError):
    """The server cannot take this now (every episode slot busy, the sandbox cannot start); retry later."""


_STATUS = {InvalidRequest: 422, NotFound: 404, Conflict: 409, Unavailable: 503}


def status_of(e: EnvServerError) -> int:
    for cls in type(e).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500
