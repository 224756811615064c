"""The part of the capture proxy's client that needs only httpx: its error, what an answer means, and the policy
version call.

`client.py` builds on it and re-exports `ProxyCallError`. The trainer's weight sync and the launcher's restart hook
import this module alone: the trainer's merged sync also runs on machines without pydantic (the GPU device check),
and `client.py` imports the wire types, which need it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import httpx

POLICY_PATH = "/policy"
POLICY_VERSION_PATH = "/policy/version"


class ProxyCallError(Exception):
    """A proxy request that did not produce its answer.

    kind: `unreachable` (connection failure, timeout, 5xx, a malformed reply: an episode is unscorable),
    `refused` (429, a proxy budget), `too_long` (the prompt outgrew the model's context),
    `rejected` (any other 4xx). What the proxy answered: `status`, `code` (its error code), `detail` (its error
    message, else the start of the body) and `body` (the start of the body); None/"" when no answer came.
    """

    def __init__(self, kind: str, message: str, *, status: int | None = None, code: str | None = None,
                 detail: str = "", body: str = ""):
        super().__init__(message)
        self.kind, self.status, self.code, self.detail, self.body = kind, status, code, detail, body

    @property
    def no_answer(self) -> bool:
        """True when the request never reached the proxy or no answer came back (a transport failure: the proxy is
        down or restarting), so the same request may be sent again."""
        return self.status is None and isinstance(self.__cause__, httpx.TransportError)


@contextmanager
def reaching(base_url: str) -> Iterator[None]:
    """Turn a transport failure (no answer at all) into an `unreachable` ProxyCallError."""
    try:
        yield
    except httpx.TimeoutException as e:
        raise ProxyCallError("unreachable", f"capture proxy at {base_url} timed out: {e!r}") from e
    except httpx.HTTPError as e:
        raise ProxyCallError("unreachable", f"capture proxy at {base_url} unreachable: {e!r}") from e


def _error_fields(r: httpx.Response) -> tuple[str | None, str]:
    """The proxy's error code and message (`{"error": {"code", "message"}}`), else None and the body's start."""
    try:
        err = r.json().get("error") or {}
        return err.get("code"), str(err.get("message") or r.text[:500])
    except (ValueError, AttributeError):
        return None, r.text[:500]


def status_error(r: httpx.Response, base_url: str, what: str | None = None) -> ProxyCallError:
    """The ProxyCallError for a non-success answer; `what`, when given, names the request at the message's start."""
    body = r.text[:500]
    code, message = _error_fields(r)
    fields = {"status": r.status_code, "code": code, "detail": message, "body": body}
    if r.status_code == 429:
        kind, text = "refused", f"capture proxy refused the call (budget): {body}"
    elif r.status_code >= 500:
        kind, text = "unreachable", f"capture proxy at {base_url} failed with {r.status_code}: {body}"
    elif r.status_code == 400 and any(w in body.lower() for w in ("context length", "maximum", "too long")):
        kind, text = "too_long", f"the prompt no longer fits the model's context: {body}"
    else:
        kind, text = "rejected", f"capture proxy rejected the call with {r.status_code}: {body}"
    return ProxyCallError(kind, f"{what}: {text}" if what else text, **fields)


def report_policy_version(http: httpx.Client, base_url: str, version: int) -> None:
    """Tell the proxy at `base_url` that the policy server now serves merged-weights version `version`:
    POST /policy/version {"version": N}. Sessions opened after it pin that version.

    `http` carries the shared token when the proxy needs one. The proxy refuses a version below its own and any
    version under adapter sync (409); that, or any answer but 200, raises a `rejected`/`unreachable`
    ProxyCallError naming the version and the proxy's reason; no answer at all raises one whose `no_answer` is
    True."""
    base = base_url.rstrip("/")
    with reaching(base):
        r = http.post(f"{base}{POLICY_VERSION_PATH}", json={"version": int(version)})
    if r.status_code != 200:
        raise status_error(r, base, f"reporting policy version {int(version)} to {base}{POLICY_VERSION_PATH}")


def merged_policy_version(http: httpx.Client, base_url: str) -> int:
    """The merged-weights version the proxy at `base_url` was last told (GET /policy's `merged_version`; 0 before
    any). Any answer but 200 with a JSON object raises a ProxyCallError."""
    base = base_url.rstrip("/")
    with reaching(base):
        r = http.get(f"{base}{POLICY_PATH}")
    if r.status_code != 200:
        raise status_error(r, base, f"reading the policy version at {base}{POLICY_PATH}")
    try:
        return int(r.json().get("merged_version") or 0)
    except (ValueError, TypeError, AttributeError) as e:
        raise ProxyCallError("unreachable", f"capture proxy at {base} sent a malformed {POLICY_PATH} answer: {e!r}",
                             status=r.status_code, body=r.text[:500]) from e


__all__ = ["POLICY_PATH", "POLICY_VERSION_PATH", "merged_policy_version", "ProxyCallError", "reaching", "report_policy_version", "status_error"]
