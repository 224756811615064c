"""The import table of STYLE.md, enforced by walking every module's AST."""

from __future__ import annotations

import ast
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "fathom"

# package -> fathom packages it may import (its own package is always allowed).
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "protocol": set(),
    # Every reach into TRL's private API. The rollout worker (TRL's loop) and the trainer both need it, and the
    # rollout worker may not import the trainer, so it is a package of its own that imports no other fathom package.
    "trl_compat": set(),
    "tasks": {"protocol", "config"},
    "policy_server": {"config"},
    "capture_proxy": {"protocol", "config"},
    "env_server": {"capture_proxy.client", "tasks", "protocol", "config"},
    "rollout_worker": {"capture_proxy.client", "env_server.client", "env_server.models", "tasks", "protocol", "config",
                       "trl_compat"},
    # The merged weight sync reports each policy version to the proxy through the proxy's client, by its httpx-only
    # core (the sync also runs where pydantic is not installed, and `capture_proxy.client` needs it).
    "trainer": {"rollout_worker", "capture_proxy.client_core", "tasks.record", "protocol", "config", "trl_compat"},
    "eval": {"rollout_worker", "capture_proxy.client", "env_server.client", "env_server.models", "policy_server.client",
             "tasks", "protocol", "config"},
    # The page's backend runs episodes in this process: its own capture proxy and env-server runtime.
    "ui": {"policy_server.served", "env_server.server", "stack.inproc", "tasks", "protocol", "config"},
    # Supervised server stacks and the main job's plan: the plan checks the split, the SFT phrasings and the
    # anchor rows before any server starts; the SFT teacher's recordings run a proxy and the teacher in-process;
    # recovery reports the last policy version to a restarted proxy through the proxy's client; the launcher
    # removes the merged-weights folder (trainer.merged_dir) when it stops.
    "stack": {"policy_server.launch", "policy_server.served", "trainer.anchor", "trainer.merged_dir", "trainer.sft_record",
              "capture_proxy.app", "capture_proxy.client_core", "env_server.scripted", "rollout_worker.session",
              "tasks", "unwind", "protocol",
              "config"},
    # The disk-sync check asks trainer.merged_dir (torch-free) which folder the merged weights fall back to.
    "doctor": {"policy_server.launch", "policy_server.models", "env_server.sandbox", "trainer.gpu_env",
               "trainer.merged_dir", "config"},
}


def _package_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    return rel.parts[0] if rel.parts else ""


# A client module and the package modules it must never reach: what it imports travels into other processes.
# A client may import its package's other client modules (`capture_proxy.client` builds on `client_core`).
CLIENT_SIDES = {"env_server.client": "fathom.env_server.server", "capture_proxy.client": "fathom.capture_proxy",
                "capture_proxy.client_core": "fathom.capture_proxy"}
CLIENT_MODULES = {f"fathom.{client}" for client in CLIENT_SIDES}


def _fathom_imports(path: Path, module_level: bool = False) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in (tree.body if module_level else ast.walk(tree)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "fathom"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "fathom":
            mods = [node.module] if node.module != "fathom" else [f"fathom.{a.name}" for a in node.names]
            found += [(node.lineno, m) for m in mods]
    return found


def _allowed(pkg: str, target: str, rel_module: str) -> bool:
    parts = target.split(".")[1:]
    if not parts or parts[0] == pkg:
        # Inside its package, a client must not reach into the server side.
        return not any(rel_module.startswith(client) and (target == server or target.startswith(server + "."))
                       and target not in CLIENT_MODULES for client, server in CLIENT_SIDES.items())
    dotted = ".".join(parts)
    return any(dotted == a or dotted.startswith(a + ".") for a in ALLOWED[pkg])


def violations(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        pkg = _package_of(path, root)
        if pkg not in ALLOWED:  # entrypoints and the package root may import anything (the rules below bound them)
            continue
        rel_module = ".".join(path.relative_to(root).with_suffix("").parts)
        for lineno, target in _fathom_imports(path):
            if not _allowed(pkg, target, rel_module):
                bad.append(f"{path.relative_to(root.parent)}:{lineno}: {pkg} imports {target}")
    return bad


def _package_init_violations(root: Path = PKG) -> list[str]:
    """A client's package `__init__` runs whenever the client is imported: it must load no module of its package
    at import time (so importing the proxy's client does not start loading the proxy's server)."""
    bad = []
    for package in sorted({client.split(".")[0] for client in CLIENT_SIDES}):
        init = root / package / "__init__.py"
        if init.exists():
            pkg = f"fathom.{package}."
            bad += [f"{init.relative_to(root.parent)}:{n}: imports {t} at import time"
                    for n, t in _fathom_imports(init, module_level=True) if t.startswith(pkg)]
    return bad


def test_import_table_holds():
    assert violations() == []


def test_checker_catches_a_forbidden_import(tmp_path):
    (tmp_path / "capture_proxy").mkdir()
    (tmp_path / "capture_proxy" / "bad.py").write_text("from fathom.env_server.server import app\n")
    (tmp_path / "env_server").mkdir()
    (tmp_path / "env_server" / "client.py").write_text("import fathom.env_server.server.app\n")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "x.py").write_text("from fathom import protocol\n")
    got = violations(tmp_path)
    assert len(got) == 3, got


def test_the_proxy_client_is_the_only_part_of_the_proxy_its_users_may_import(tmp_path):
    assert _package_init_violations() == []
    for pkg in ("env_server", "rollout_worker", "eval"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "ok.py").write_text("from fathom.capture_proxy.client import ProxyClient\n")
        (tmp_path / pkg / "bad.py").write_text("from fathom.capture_proxy.service import ProxyService\n"
                                               "import fathom.capture_proxy.app\nfrom fathom import capture_proxy\n")
    (tmp_path / "capture_proxy").mkdir()
    (tmp_path / "capture_proxy" / "client.py").write_text("from fathom.capture_proxy import errors\n")
    (tmp_path / "capture_proxy" / "__init__.py").write_text("from fathom.capture_proxy.app import create_app\n")
    got = violations(tmp_path)
    assert sorted(got) == sorted(
        [f"{tmp_path.name}/{p}/bad.py:{n}: {p} imports {t}" for p in ("env_server", "rollout_worker", "eval")
         for n, t in ((1, "fathom.capture_proxy.service"), (2, "fathom.capture_proxy.app"), (3, "fathom.capture_proxy"))]
        + [f"{tmp_path.name}/capture_proxy/client.py:1: capture_proxy imports fathom.capture_proxy"]), got
    assert _package_init_violations(tmp_path) == [
        f"{tmp_path.name}/capture_proxy/__init__.py:1: imports fathom.capture_proxy.app at import time"]

def test_the_trainer_reaches_the_proxy_only_through_the_clients_httpx_core(tmp_path):
    # What the core imports, the trainer's weight sync imports on machines without pydantic (the GPU device check).
    tree = ast.parse((PKG / "capture_proxy" / "client_core.py").read_text())
    imported = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "contextlib", "typing", "httpx"}, imported
    for pkg in ("trainer", "stack"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "ok.py").write_text("from fathom.capture_proxy.client_core import report_policy_version\n")
        (tmp_path / pkg / "bad.py").write_text("from fathom.capture_proxy.client import ProxyClient\n")
    assert sorted(violations(tmp_path)) == [f"{tmp_path.name}/{p}/bad.py:1: {p} imports fathom.capture_proxy.client"
                                            for p in ("stack", "trainer")]


# Commands are thin: they may import every fathom package, but no package imports a command, and a command
# imports no other command. cli.py (the command table) and common.py (CLI option helpers) are not commands.
NOT_COMMANDS = {"__init__", "cli", "common"}


def _entrypoint_imports(path: Path) -> list[tuple[int, str]]:
    """`_fathom_imports`, with `from fathom.entrypoints import x` read as an import of fathom.entrypoints.x."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = [(n, t) for n, t in _fathom_imports(path) if t != "fathom.entrypoints"]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "fathom.entrypoints":
            found += [(node.lineno, f"fathom.entrypoints.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "fathom":
            found += [(node.lineno, f"fathom.{a.name}") for a in node.names if a.name == "entrypoints"]
    return found


def _command_violations(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        where = f"{path.relative_to(root.parent)}"
        targets = [(n, t) for n, t in _entrypoint_imports(path) if t.split(".")[:2] == ["fathom", "entrypoints"]]
        if rel.parts[0] != "entrypoints":
            bad += [f"{where}:{n}: {rel.parts[0]} imports the command layer ({t})" for n, t in targets]
        elif len(rel.parts) == 2 and path.stem not in NOT_COMMANDS:
            bad += [f"{where}:{n}: command {path.stem} imports {t}" for n, t in targets
                    if t.split(".")[2:3] != ["common"]]
    return bad


def test_commands_are_imported_by_no_package_and_import_no_other_command(tmp_path):
    assert _command_violations() == []
    (tmp_path / "entrypoints").mkdir()
    (tmp_path / "entrypoints" / "a_cmd.py").write_text("from fathom.entrypoints.common import die\n"
                                                      "from fathom.entrypoints.b_cmd import helper\n")
    (tmp_path / "entrypoints" / "c_cmd.py").write_text("from fathom.entrypoints import b_cmd\n")
    (tmp_path / "entrypoints" / "cli.py").write_text("from fathom.entrypoints import a_cmd, b_cmd\n")
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "x.py").write_text("import fathom.entrypoints.common\n")
    (tmp_path / "y.py").write_text("from fathom import entrypoints\n")
    got = _command_violations(tmp_path)
    assert len(got) == 4, got
    assert any("command a_cmd imports fathom.entrypoints.b_cmd" in g for g in got)
    assert any("command c_cmd imports fathom.entrypoints.b_cmd" in g for g in got)


def test_the_new_packages_are_under_the_table(tmp_path):
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "bad.py").write_text("from fathom.trainer.grpo import build\nfrom fathom.ui.app import x\n")
    (tmp_path / "doctor").mkdir()
    (tmp_path / "doctor" / "bad.py").write_text("from fathom.capture_proxy.app import create_app\n")
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "bad.py").write_text("from fathom.stack.supervisor import Supervisor\n")
    got = violations(tmp_path)
    assert len(got) == 4, got


# fathom.testing (fakes for tests and benchmarks) is imported by no fathom module but the command that serves it.
TESTING_IMPORTERS = {"entrypoints/env_cmd.py"}


def _testing_violations(root: Path = PKG) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("testing/") or rel in TESTING_IMPORTERS:
            continue
        bad += [f"{path.relative_to(root.parent)}:{n}: imports {t}" for n, t in _fathom_imports(path)
                if t == "fathom.testing" or t.startswith("fathom.testing.")]
    return bad


def test_production_code_never_imports_the_testing_package(tmp_path):
    assert _testing_violations() == []
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "x.py").write_text("from fathom.testing.fake_vllm import create_fake_vllm\n")
    assert len(_testing_violations(tmp_path)) == 1
