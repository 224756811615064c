"""`fathom deploy space --dry-run`: the Space folder it writes, and the image recipe it ships."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from typer.testing import CliRunner

from fathom.config import load_config
from fathom.env_server import space as space_mod
from fathom.entrypoints.cli import app

ROOT = Path(__file__).resolve().parents[3]


def _no_push(*_a, **_k):
    raise AssertionError("a dry run must not call the Hub")


def test_dry_run_writes_the_space_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(space_mod, "push_space", _no_push)
    out = tmp_path / "space"
    res = CliRunner().invoke(app, ["deploy", "space", "me/fathom-env", "--dry-run", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "dry run: would create Space me/fathom-env" in res.output and "Dockerfile" in res.output
    # Spaces build the Dockerfile at the root; it is the image recipe the container test builds.
    assert (out / "Dockerfile").read_text() == space_mod.DOCKERFILE.read_text()
    for rel in ("pyproject.toml", "configs/container.toml", "fathom/env_server/openenv.yaml",
                "fathom/env_server/server/requirements.txt", "fathom/entrypoints/cli.py"):
        assert (out / rel).is_file(), rel
    assert not list(out.rglob("__pycache__"))
    # Every COPY source of the Dockerfile exists in the folder (it is the build context).
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", (out / "Dockerfile").read_text(), flags=re.M):
        for p in src.split():
            assert (out / p).exists(), p
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    port = load_config(ROOT / "configs" / "container.toml").env_server.port
    assert meta["sdk"] == "docker" and meta["app_port"] == port == 7860 and "openenv" in meta["tags"]
    assert "GET /health" in card


def test_bad_space_id_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["deploy", "space", "no-owner", "--dry-run", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "owner/name" in res.output


def test_image_requirements_are_project_dependencies():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower().replace("_", "-") for d in deps}
    reqs = (ROOT / "fathom/env_server/server/requirements.txt").read_text().splitlines()
    pinned = [r.split("==")[0].lower().replace("_", "-") for r in reqs if r and not r.startswith("#")]
    assert pinned and set(pinned) <= names, set(pinned) - names
    assert "torch" not in pinned and "vllm" not in pinned


def test_openenv_sees_the_docker_deployment():
    from openenv.cli._validation import get_deployment_modes

    assert get_deployment_modes(ROOT / "fathom" / "env_server")["docker"] is True


def test_real_push_needs_the_shared_token_and_stores_it_as_a_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("FATHOM_SHARED_TOKEN", raising=False)
    monkeypatch.setattr(space_mod, "push_space", _no_push)
    args = ["deploy", "space", "me/fathom-env", "--out", str(tmp_path / "s")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "FATHOM_SHARED_TOKEN" in res.output  # refused before any Hub call

    pushed = {}
    monkeypatch.setattr(space_mod, "push_space", lambda out, repo, **kw: pushed.update(kw, repo=repo) or "url")
    monkeypatch.setenv("FATHOM_SHARED_TOKEN", "s3cret-token")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert pushed["shared_token"] == "s3cret-token" and pushed["repo"] == "me/fathom-env"
    assert "s3cret-token" not in res.output
