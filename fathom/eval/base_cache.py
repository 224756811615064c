"""The base stage's evaluation, computed once and reused: `$FATHOM_HOME/eval_cache/base/<key>/`.

The untrained model's results depend only on the model's weights, the tasks, the code that runs an episode, the
settings an episode runs under, and the sampling; not on anything a run trains. So `fathom eval stages` scores
`base` once per key and copies the stored stage directory (results.json, episodes, report) on every later run
with the same key. The key is a sha256 over those inputs, written beside the stored results (`key.json`) and into
the stage summary, so a reader can see what a cached figure was computed under:
- `model`: the prepared model's manifest (`fathom_model.json`, with its checksum), else every file's name and
  size in the model directory and the hash of its `config.json`;
- `tasks`: the exact task ids, in order;
- `harness` and `python`: the hash of the source of every package that shapes an episode or its score (env server, tasks,
  capture proxy, protocol, eval, config, policy server), so any change to that code is a new key, and the
  Python version (the haystacks are cut from its standard library's text);
- `settings`: the env server's and sandbox's settings, less the addresses and capacities that change no
  episode; the eval's sampling, depth and timeout; the served dtype, device, eager mode and seed.

A key that misses runs the stage as before and stores it; a write is atomic (a temporary folder renamed), so an
interrupted run never leaves a half-stored result that a later run would read.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HARNESS_PACKAGES = ("env_server", "tasks", "capture_proxy", "protocol", "eval", "config", "policy_server")
"""Packages (and modules) under `fathom/` whose source is part of the key."""

ENV_FIELDS_IGNORED = frozenset({"host", "port", "proxy_url", "urls", "max_concurrent_envs", "task_cache_chars",
                                "max_body_bytes", "proxy_timeout_s", "result_retention_s", "http_episode_idle_s",
                                "llm_batch_concurrency"})
"""Env server settings that change where and how many episodes run, never what one does. Every other setting,
including any added later, is part of the key."""

KEY_FILE = "key.json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_fingerprint(model_dir: Path) -> dict[str, Any]:
    """What identifies the weights in `model_dir` without hashing gigabytes: the FATHOM manifest when there is
    one (it records the weights' checksum), else the files' names and sizes and the hash of config.json."""
    from fathom.eval.base_model import MODEL_MANIFEST

    manifest = model_dir / MODEL_MANIFEST
    if manifest.is_file():
        return {"manifest": json.loads(manifest.read_text())}
    files = sorted((str(p.relative_to(model_dir)), p.stat().st_size) for p in model_dir.rglob("*") if p.is_file())
    config = model_dir / "config.json"
    return {"files": files, "config_sha256": _sha(config.read_bytes()) if config.is_file() else None}


def harness_fingerprint(root: Path | None = None) -> str:
    """sha256 over the source of `HARNESS_PACKAGES` (path and bytes of each .py file, in sorted order)."""
    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for name in HARNESS_PACKAGES:
        paths = sorted((root / name).rglob("*.py")) if (root / name).is_dir() else [root / f"{name}.py"]
        for p in paths:
            if p.is_file():
                h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def key_parts(cfg, model_dir: Path, task_ids: list[str], *, served_dtype: str, device: str,
              reload: bool) -> dict[str, Any]:
    """Every input of the base stage's results (module docstring), as plain JSON."""
    from fathom.eval.run import settings

    sampling, limits = settings(cfg)
    env = {k: v for k, v in cfg.env_server.model_dump(mode="json").items() if k not in ENV_FIELDS_IGNORED}
    ps = cfg.policy_server
    return {
        "model": model_fingerprint(Path(model_dir)),
        "max_model_len": cfg.model.max_model_len,
        "tasks": _sha("\n".join(task_ids).encode()),
        "n_tasks": len(task_ids),
        "harness": harness_fingerprint(),
        "python": sys.version,  # the tasks' haystacks are cut from the standard library's own text
        "env_server": env,
        "sandbox": cfg.sandbox.model_dump(mode="json"),
        "sampling": sampling.model_dump(mode="json"),
        "limits": limits.model_dump(mode="json"),
        "episode_timeout_s": cfg.eval.episode_timeout_s,
        "serving": {"dtype": served_dtype, "device": device, "enforce_eager": ps.enforce_eager, "seed": ps.seed,
                    "reloaded_from_disk": reload},
    }


def cache_key(parts: dict[str, Any]) -> str:
    """The key of `key_parts`: sha256 of their canonical JSON."""
    return _sha(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode())


def cache_root(home: Path | None = None) -> Path:
    from fathom.config.base import fathom_home

    return (home or fathom_home()) / "eval_cache" / "base"


@dataclass
class BaseCache:
    """The cache entry of one base stage: `restore` it, or `store` it after scoring."""

    key: str
    parts: dict[str, Any]
    home: Path | None = None

    @classmethod
    def for_stage(cls, cfg, model_dir: Path, task_ids: list[str], *, served_dtype: str, device: str, reload: bool,
                  home: Path | None = None) -> "BaseCache | None":
        """The entry for scoring the base model on `task_ids`; None when a task is an imported one (its text can
        change under the same id, so its results are never reused)."""
        from fathom.tasks.record import parse_id

        try:
            for t in task_ids:
                parse_id(t)
        except KeyError:
            return None
        parts = key_parts(cfg, model_dir, task_ids, served_dtype=served_dtype, device=device, reload=reload)
        return cls(cache_key(parts), parts, home)

    @property
    def path(self) -> Path:
        return cache_root(self.home) / self.key

    def restore(self, out: Path) -> dict | None:
        """Copy the stored stage to `out` (replacing what is there) and return its results.json; None when
        nothing is stored under this key."""
        results = self.path / "results.json"
        if not results.is_file():
            return None
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(self.path, out, ignore=shutil.ignore_patterns(KEY_FILE))
        return json.loads(results.read_text())

    def store(self, stage_dir: Path) -> Path:
        """Store the scored stage directory under this key (atomically: a temporary folder renamed; an existing
        entry is kept). Returns the entry's path."""
        final = self.path
        if final.is_dir():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{self.key}.{uuid.uuid4().hex}.tmp"
        try:
            shutil.copytree(stage_dir, tmp)
            (tmp / KEY_FILE).write_text(json.dumps({"key": self.key, "parts": self.parts}, indent=2) + "\n")
            tmp.rename(final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not final.is_dir():
                raise
        return final
