"""The sandboxed REPL: RestrictedPython in a fork-per-episode worker under OS isolation layers.

    with SandboxPool(cfg) as pool:
        ep = pool.new_episode(context, llm_handler)
        res = ep.run("print(len(context))")

Exports resolve lazily so the zygote, which imports submodules of this package, does
not pay for the config machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["EpisodeSandbox", "RunResult", "SandboxError", "SandboxPool", "detect_layers"]

if TYPE_CHECKING:
    from fathom.env_server.sandbox.api import SandboxPool
    from fathom.env_server.sandbox.results import RunResult, SandboxError
    from fathom.env_server.sandbox.episode import EpisodeSandbox
    from fathom.env_server.sandbox.layers import detect_layers


def __getattr__(name: str) -> Any:
    if name in ("RunResult", "SandboxError"):
        from fathom.env_server.sandbox import results

        return getattr(results, name)
    if name == "SandboxPool":
        from fathom.env_server.sandbox import api

        return getattr(api, name)
    if name == "EpisodeSandbox":
        from fathom.env_server.sandbox.episode import EpisodeSandbox

        return EpisodeSandbox
    if name == "detect_layers":
        from fathom.env_server.sandbox.layers import detect_layers

        return detect_layers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
