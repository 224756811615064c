"""The env server as a Hugging Face Space (Docker SDK): the folder that is uploaded, and the upload.

The folder is a build context for fathom/env_server/server/Dockerfile, moved to the root where Spaces look for it:
pyproject.toml, the fathom package, configs/container.toml and a README whose YAML front matter is the Space card.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fathom.config import load_config
from fathom.config.security import SHARED_TOKEN_ENV

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "fathom" / "env_server" / "server" / "Dockerfile"
CONTAINER_CONFIG = ROOT / "configs" / "container.toml"
HEALTH_PATH = "/health"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def space_card(repo_id: str, port: int) -> str:
    """README.md of the Space: the Hub reads sdk and app_port from its front matter."""
    name = repo_id.split("/")[-1]
    return f"""---
title: {name}
emoji: 🌊
colorFrom: blue
colorTo: indigo
sdk: docker
app_port: {port}
pinned: false
short_description: FATHOM RLM environment (OpenEnv), sandboxed Python REPL
tags:
  - openenv
  - fathom
  - long-context
---

# {name}: the FATHOM env server

An [OpenEnv](https://github.com/meta-pytorch/OpenEnv) environment for Recursive Language Model episodes. A long
document lives in a sandboxed Python REPL as `context`; the agent writes code to read it, calls `llm()` on pieces,
and answers with `FINAL(...)`. Rewards are computed inside the environment.

- Health: `GET {HEALTH_PATH}` on port {port} (what the Space routes to); the only route open without the token.
- Every other route needs the Space's shared token (its `{SHARED_TOKEN_ENV}` secret) as the header
  `X-Fathom-Token` (or `Authorization: Bearer`).
- OpenEnv API: `POST /reset`, `POST /step`, `GET /state`, `GET /schema`, `WS /ws`.
- Whole episodes against a model behind a FATHOM capture proxy: `POST /episodes`, `GET /episodes/{{id}}`.

```python
from openenv.core.generic_client import GenericEnvClient

url = "https://{repo_id.replace('/', '-').replace('_', '-').lower()}.hf.space"
with GenericEnvClient(base_url=url, headers={{"X-Fathom-Token": TOKEN}}).sync() as env:
    obs = env.reset(task_id="needle-4k-s1000000").observation
    print(env.step({{"code": "print(len(context))"}}).observation["output"])
```

Built from `fathom/env_server/server/Dockerfile` (no torch, no vLLM); `fathom doctor` inside the container lists
the sandbox layers that hold there. Pushed with `fathom deploy space {repo_id}`.
"""


def build_space_folder(out: Path, repo_id: str, config: Path = CONTAINER_CONFIG) -> list[Path]:
    """Write the Space's files under `out` (replacing what was there); returns them, relative to `out`."""
    cfg = load_config(config)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy2(DOCKERFILE, out / "Dockerfile")
    shutil.copy2(ROOT / "pyproject.toml", out / "pyproject.toml")
    shutil.copytree(ROOT / "fathom", out / "fathom", ignore=_SKIP)
    (out / "configs").mkdir()
    # The image always serves configs/container.toml; a different --config is shipped under that name.
    shutil.copy2(config, out / "configs" / "container.toml")
    (out / "README.md").write_text(space_card(repo_id, cfg.env_server.port), encoding="utf-8")
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())


def push_space(out: Path, repo_id: str, *, private: bool, token: str | None, shared_token: str) -> str:
    """Create the Space if needed (Docker SDK), store the shared token as its secret, upload the folder; returns
    the Space's URL. The env server binds past loopback there, which it refuses without the token."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="space", space_sdk="docker", private=private, exist_ok=True)
    api.add_space_secret(repo_id, SHARED_TOKEN_ENV, shared_token,
                         description="FATHOM shared token: clients send it as X-Fathom-Token")
    api.upload_folder(folder_path=str(out), repo_id=repo_id, repo_type="space",
                      commit_message="fathom deploy space: env server image")
    return f"https://huggingface.co/spaces/{repo_id}"
