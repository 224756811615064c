"""What can go wrong in the capture proxy, as domain errors. Only the routes (app.py) turn them into HTTP.

Each error's message says what was wrong and what to do; `code` is the stable machine-readable reason that
clients and the rejection metrics use; `headers` carry the call id and policy version once a call was recorded.
"""

from __future__ import annotations


class ProxyError(Exception):
    code = "proxy_error"

    def __init__(self, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or type(self).code
        self.headers = headers or {}


class InvalidRequest(ProxyError):
    """The request cannot be served as sent: malformed JSON, a bad header, an unsupported parameter."""
    code = "invalid_request"


class InvalidSessionSpec(ProxyError):
    """POST /sessions asked for something a session cannot be (e.g. trainable with top-p sampling)."""
    code = "invalid_session_spec"


class BodyTooLarge(ProxyError):
    code = "body_too_large"


class SessionRequired(ProxyError):
    """A model call without an open session's id as its API key."""
    code = "invalid_session"


class UnknownSession(ProxyError):
    code = "unknown_session"


class UnknownServedModel(ProxyError):
    """An eval session named a model the policy server does not serve."""
    code = "unknown_model"


class Conflict(ProxyError):
    """The request is valid but the session or proxy is in a state that refuses it (not trainable, wrong sync
    mode, a policy version going backwards, a broken capture)."""
    code = "conflict"


class BudgetExhausted(ProxyError):
    code = "budget_exceeded"


class PolicyUnavailable(ProxyError):
    """The policy server cannot be reached to pin a version; retry once it is up."""
    code = "policy_unavailable"


class UpstreamFailed(ProxyError):
    """The policy server's call failed. `status` is the engine's own answer when the request itself cannot
    succeed (400, 413, 422: e.g. a prompt past the context length), so the harness stops instead of retrying."""
    code = "upstream_error"

    def __init__(self, message: str, code: str | None = None, headers: dict[str, str] | None = None,
                 status: int | None = None) -> None:
        super().__init__(message, code, headers)
        self.status = status


class InvalidCapture(ProxyError):
    """Turns that were accepted on arrival fail OpenEnv's TrainingTrace when served: a bug, not bad input."""
    code = "invalid_capture"
