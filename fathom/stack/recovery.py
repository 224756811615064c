"""What a restarted server forgot, re-applied by `fathom launch`'s supervisor once it is healthy again.

- vLLM restarts on the base weights. Under merged sync the trainer's newest merged weights are reloaded
  from the directory `policy_state.json` names, so the restarted server serves the version the proxy pins.
- The capture proxy restarts at policy version 0 with no sessions. The last version the trainer published
  is reported to it again; sessions opened before it are gone and answer 404 (their rollouts are unscorable).
- Under adapter sync vLLM forgets its runtime-loaded `trl-policy-vN` adapters: the proxy then pins new
  sessions to the base, labelled version 0, until the trainer's next sync loads the next adapter. Those
  rollouts are labelled honestly, and TRL drops them as stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import httpx

from fathom.capture_proxy.client_core import report_policy_version
from fathom.stack.supervisor import Child
from fathom.protocol import token_headers


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def reapply_weights(policy_url: str, state_path: Path, timeout_s: float = 600.0) -> Callable[[Child], None]:
    def hook(_child: Child) -> None:
        state = read_state(state_path)
        if not state or not (state.get("version") or state.get("weights_path")):
            return  # nothing synced yet: the base weights are the policy
        path = state.get("weights_path")
        if not path:
            raise RuntimeError(f"policy version {state['version']} was synced over NCCL and lives only in the "
                               "trainer, so a restarted policy server cannot get it back")
        r = httpx.post(f"{policy_url}/collective_rpc", timeout=timeout_s,
                       json={"method": "reload_weights", "kwargs": {"weights_path": path}, "timeout": timeout_s})
        if r.status_code != 200:
            raise RuntimeError(f"reloading the merged weights {path} answered HTTP {r.status_code}: {r.text[:300]}")
    return hook


def reapply_version(proxy_url: str, state_path: Path, token: str | None = None) -> Callable[[Child], None]:
    def hook(_child: Child) -> None:
        state = read_state(state_path)
        if state and state.get("version"):
            with httpx.Client(timeout=30, headers=token_headers(token)) as http:
                report_policy_version(http, proxy_url, int(state["version"]))
    return hook


def hooks_for(cfg: Any) -> dict[str, Callable[[Child], None]]:
    """Restart hooks of the main job's servers, by step name."""
    state = Path(cfg.run_dir) / "policy_state.json"  # fathom.trainer.build.policy_state_path, without torch
    if cfg.policy_server.weight_sync != "merged":
        return {}
    return {"policy": reapply_weights(cfg.policy_url, state, cfg.trainer.weight_sync_timeout_s),
            "proxy": reapply_version(cfg.proxy_url, state, cfg.token())}
