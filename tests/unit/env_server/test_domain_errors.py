"""Domain code speaks in domain errors and shares one episode set-up and verification path;
only the app's routes turn errors into HTTP statuses."""

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


def _calls(name: str, attr: str) -> int:
    n = 0
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == attr) or (isinstance(f, ast.Name) and f.id == attr):
                n += 1
    return n


def test_one_set_up_and_verification_path():
    # The harness is built, and the task scored, in episode_core only; both modes call it.
    for name in ["episodes.py", "environment.py", "step_episodes.py"]:
        assert _calls(name, "Harness") == 0 and _calls(name, "Tally") == 0, name
        assert _calls(name, "score") == 0, name
        assert _calls(name, "build_harness") + _calls(name, "verify") in (0, 2), name
    assert _calls("episodes.py", "build_harness") == 1 and _calls("environment.py", "build_harness") == 1
    assert _calls("episode_core.py", "Harness") == 1 and _calls("episode_core.py", "score") == 1


def test_statuses():
    assert [status_of(e("m")) for e in (InvalidRequest, NotFound, Conflict, Unavailable, EnvServerError)] == [
        422, 404, 409, 503, 500]
    assert str(Conflict("episode 'x' is done")) == "episode 'x' is done"  # over /ws the message is sent as is
