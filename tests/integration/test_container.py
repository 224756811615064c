"""The env server's container image, built and run with podman on a base made from Debian packages.

Minutes on a fresh clone (debootstrap + pip inside the build); the base and the build's layers are cached under
.cache/container/, so reruns take seconds plus the run itself.
"""

from __future__ import annotations

import time

import httpx
import pytest

from fathom.config import load_config
from fathom.protocol import token_headers
from fathom.tasks import load_split, reference_solution
from tests import container_image as ci
from tests.ports import free_port
from tests.sandbox_layers import SWITCH, required

CONTAINER_CONFIG = ci.ROOT / "configs" / "container.toml"


MYDOCS_CONTEXT = "filler " * 200 + "the code is 4711."


def _task_store(root):
    """A host task store holding the imported split `mydocs` (one task), as `fathom tasks import` writes it."""
    from fathom.config.tasks import TaskSource
    from fathom.tasks import store

    src = root / "mydocs.jsonl"
    src.write_text('{"question": "Which code?", "context": "' + MYDOCS_CONTEXT + '", "answer": 4711}\n')
    store.set_root(root / "store")
    try:
        store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(src)))
    finally:
        store.set_root(None)
    return root / "store"


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    """One container for the module, with a host task store mounted read-only at the image's $FATHOM_HOME/tasks,
    as docs/deploy.md serves imported splits; the generated splits need no store."""
    missing = ci.missing_tools()
    if missing:
        why = f"{missing} not installed (apt-get install -y podman debootstrap runc; `make setup` does)"
        if required():
            pytest.fail(f"{why}; {SWITCH}=1 requires them")
        pytest.skip(why)
    ci.build_image()
    store_dir = _task_store(tmp_path_factory.mktemp("container-store"))
    name, port = f"fathom-test-{free_port()}", free_port()
    t0 = time.monotonic()
    ci.run_container(name, port, extra=["-v", f"{store_dir}:/home/user/.cache/fathom/tasks:ro"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            state = ci.podman("inspect", name, "--format", "{{.State.Status}}", check=False).stdout.strip()
            if state != "running" or time.monotonic() > deadline:
                pytest.fail(f"container {state}, no /health after {time.monotonic() - t0:.0f}s:\n"
                            f"{ci.stop_container(name)[-3000:]}")
            time.sleep(0.3)
        yield name, url
    finally:
        print(ci.stop_container(name)[-2000:])


def test_health_and_non_root(container):
    name, url = container
    assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "healthy"
    # Bound past loopback, it serves nothing but /health without the shared token.
    assert httpx.get(f"{url}/schema", timeout=5).status_code == 401
    assert httpx.get(f"{url}/schema", timeout=5, headers=token_headers(ci.TOKEN)).status_code == 200
    assert ci.exec_in(name, "id", "-u").stdout.strip() == "1000"
    # No trainer stack in the image.
    probe = "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('vllm'))"
    p = ci.exec_in(name, "python3", "-c", probe)
    assert p.stdout.strip() == "None None", p.stdout + p.stderr


def test_doctor_in_the_container_shows_the_required_layers(container):
    name, _ = container
    p = ci.exec_in(name, "fathom", "doctor", env_extra={"COLUMNS": "200"})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in p.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip().startswith("sandbox:")}
    for layer in load_config(CONTAINER_CONFIG).sandbox.required_layers:
        assert rows.get(f"sandbox:{layer}") == "yes", p.stdout


def test_scripted_episode_over_the_generic_openenv_client(container):
    from openenv.core.generic_client import GenericEnvClient

    _, url = container
    task_id = load_split("test")[1]
    with GenericEnvClient(base_url=url, headers=token_headers(ci.TOKEN)).sync() as env:
        r = env.reset(task_id=task_id)
        obs = r.observation
        assert obs["task_id"] == task_id and not r.done
        r = env.step({"code": "print(len(context))"})
        assert r.observation["output"].strip() == str(obs["context_chars"])
        r = env.step({"code": reference_solution(obs["question"])})
        assert r.done and r.reward > 0.5 and r.observation["reward_components"]["correct"]


@pytest.mark.parametrize("code", [
    "print(open('/etc/passwd').read())",
    # Past the RestrictedPython guard (a re-exported module), so the kernel layers must hold inside the container.
    "import json\nprint(json.codecs.open('/etc/passwd').read())",
])
def test_reading_etc_passwd_is_refused(container, code):
    from openenv.core.generic_client import GenericEnvClient

    _, url = container
    with GenericEnvClient(base_url=url, headers=token_headers(ci.TOKEN)).sync() as env:
        env.reset(task_id=load_split("test")[0])
        out = env.step({"code": code + "\nprint('ESCAPED')"}).observation["output"]
    assert "root:" not in out and "ESCAPED" not in out, out
    assert "Error" in out, out


def test_an_imported_split_served_from_a_mounted_store(container):
    """The host's task store mounted read-only at the image's $FATHOM_HOME/tasks serves `mydocs-N` ids."""
    from openenv.core.generic_client import GenericEnvClient

    _, url = container
    with GenericEnvClient(base_url=url, headers=token_headers(ci.TOKEN)).sync() as env:
        obs = env.reset(task_id="mydocs-0").observation
        assert obs["task_id"] == "mydocs-0" and obs["context_chars"] == len(MYDOCS_CONTEXT)
        r = env.step({"code": "FINAL(context.split()[-1].rstrip('.'))"})
        assert r.done and r.observation["reward_components"]["correct"]
