"""Domain code speaks in domain errors and shares one episode set-up and verification path (and one way to run a
whole episode); only the app's routes turn errors into HTTP statuses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fathom.env_server.server.errors import Conflict, EnvServerError, InvalidRequest, NotFound, Unavailable, status_of

SERVER = Path(__file__).resolve().parents[3] / "fathom" / "env_server" / "server"
DOMAIN = ["episodes.py", "environment.py", "step_episodes.py", "episode_core.py", "runtime.py"]


def _tree(name: str) -> ast.Module:
    return ast.parse((SERVER / name).read_text())


@pytest.mark.parametrize("name", DOMAIN)
def test_domain_modules_do_not_speak_http(name):
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith(("fastapi", "starlette")), f"{name} imports {node.module}"
        if isinstance(node, ast.Name):
            assert node.id != "HTTPException", f"{name} uses HTTPException"


def _calls(name: str | Path, attr: str) -> int:
    n = 0
    for node in ast.walk(_tree(name) if isinstance(name, str) else ast.parse(name.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == attr) or (isinstance(f, ast.Name) and f.id == attr):
                n += 1
    return n


def _called_names(path: Path) -> set[str]:
    """Every name called in `path`, as `_calls` matches it (`f(...)` and `x.f(...)`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                names.add(f.attr)
            elif isinstance(f, ast.Name):
                names.add(f.id)
    return names


def test_one_set_up_and_verification_path():
    # The harness is built, and the task scored, in episode_core only; both modes call it.
    for name in ["episodes.py", "environment.py", "step_episodes.py"]:
        assert _calls(name, "Harness") == 0 and _calls(name, "Tally") == 0, name
        assert _calls(name, "score") == 0, name
        assert _calls(name, "build_harness") + _calls(name, "verify") in (0, 2), name
    assert _calls("episodes.py", "run_episode") == 1 and _calls("environment.py", "build_harness") == 1
    assert _calls("episode_core.py", "Harness") == 1 and _calls("episode_core.py", "score") == 1


def test_one_way_to_run_an_episode():
    """Whole episodes (the env server's /episodes, `fathom ask`, `fathom ui`) run through `run_episode`; only it
    drives the root loop (the harness itself runs nested ones), and only it and step mode build a harness."""
    fathom = SERVER.parents[1]
    attrs = ("run_loop", "build_harness", "run_episode")
    where: dict[str, list[str]] = {attr: [] for attr in attrs}
    for p in sorted(fathom.rglob("*.py")):  # each file parsed once for all three names: the package is large
        called = _called_names(p)
        for attr in attrs:
            if attr in called:
                where[attr].append(p.relative_to(fathom).as_posix())
    assert where["run_loop"] == ["env_server/server/episode_core.py", "env_server/server/harness.py"], where
    assert where["build_harness"] == ["env_server/server/environment.py", "env_server/server/episode_core.py"], where
    callers = where["run_episode"]
    assert len(callers) == 3 and "env_server/server/episodes.py" in callers, where
    assert any(p.endswith("ask_cmd.py") for p in callers) and any("ui" in p for p in callers), where


def test_statuses():
    assert [status_of(e("m")) for e in (InvalidRequest, NotFound, Conflict, Unavailable, EnvServerError)] == [
        422, 404, 409, 503, 500]
    assert str(Conflict("episode 'x' is done")) == "episode 'x' is done"  # over /ws the message is sent as is
