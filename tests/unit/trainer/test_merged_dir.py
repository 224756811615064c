"""Where merged weights go (`policy_server.merged_dir`): tmpfs with room, the run dir when it has none, a path as
given; and the tmpfs folder's removal."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.trainer import merged_dir
from fathom.trainer.merged_dir import MARGIN_BYTES, choose, mem_available, remove_tmpfs, tmpfs_dir

MIB = 2**20


def free(n_bytes: int):
    return lambda _path: shutil._ntuple_diskusage(10**12, 10**12 - n_bytes, n_bytes)


@pytest.fixture(autouse=True)
def plenty_of_memory(monkeypatch):
    monkeypatch.setattr(merged_dir, "mem_available", lambda: 10**15)  # the tests below size the tmpfs alone


def test_auto_takes_tmpfs_when_it_holds_two_copies_and_the_margin(tmp_path):
    shm, run = tmp_path / "shm", tmp_path / "runs" / "demo"
    shm.mkdir()
    need = 513 * MIB
    got = choose("auto", run, "demo", need, shm=shm, usage=free(2 * need + MARGIN_BYTES))
    assert got.tmpfs and got.note is None
    assert got.path == tmpfs_dir(run, "demo", shm) and got.path.parent == shm and got.path.name.startswith("fathom-demo-")


def test_auto_falls_back_to_the_run_dir_and_says_why_when_tmpfs_is_too_small(tmp_path):
    shm, run = tmp_path / "shm", tmp_path / "runs" / "demo"
    shm.mkdir()
    need = 513 * MIB
    got = choose("auto", run, "demo", need, shm=shm, usage=free(2 * need + MARGIN_BYTES - 1))
    assert not got.tmpfs and got.path == run / "merged"
    assert all(s in got.note for s in (str(shm), str(run / "merged"), "policy_server.merged_dir", "513 MiB"))


def test_the_folders_own_files_count_as_free_space(tmp_path):
    # a resumed run finds its last copy there; it is pruned after the next reload, so it does not count against
    shm, run = tmp_path / "shm", tmp_path / "run"
    (tmpfs_dir(run, "r", shm) / "merged-1-000001").mkdir(parents=True)
    (tmpfs_dir(run, "r", shm) / "merged-1-000001" / "model.safetensors").write_bytes(b"x" * 1000)
    assert choose("auto", run, "r", 1000, shm=shm, usage=free(1000 + MARGIN_BYTES)).tmpfs
    assert not choose("auto", run, "r", 1000, shm=shm, usage=free(999 + MARGIN_BYTES)).tmpfs


def test_a_tmpfs_larger_than_the_available_memory_holds_only_what_memory_holds(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    need = 513 * MIB
    room = 2 * need + MARGIN_BYTES
    assert choose("auto", tmp_path, "r", need, shm=shm, usage=free(10**12), available=lambda: room).tmpfs
    got = choose("auto", tmp_path, "r", need, shm=shm, usage=free(10**12), available=lambda: room - 1)
    assert not got.tmpfs and "available memory" in got.note
    # a kernel that does not say leaves the tmpfs's own free space to decide
    assert choose("auto", tmp_path, "r", need, shm=shm, usage=free(room), available=lambda: None).tmpfs


def test_mem_available_reads_meminfo(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       24684000 kB\nMemAvailable:   10240 kB\n")
    assert mem_available(tmp_path / "meminfo") == 10240 * 1024
    (tmp_path / "meminfo").write_text("MemTotal:       24684000 kB\n")
    assert mem_available(tmp_path / "meminfo") is None and mem_available(tmp_path / "missing") is None


def test_auto_without_tmpfs_uses_the_run_dir_and_says_so(tmp_path):
    got = choose("auto", tmp_path / "run", "r", 1, shm=tmp_path / "no-shm")
    assert not got.tmpfs and got.path == tmp_path / "run" / "merged" and str(tmp_path / "no-shm") in got.note


def test_a_path_is_used_as_given_and_empty_means_the_run_dir(tmp_path):
    never = free(0)  # no room anywhere: a path is not checked
    assert choose("/data/merged", tmp_path, "r", 10**12, shm=tmp_path, usage=never).path == Path("/data/merged")
    got = choose("", tmp_path / "run", "r", 10**12, shm=tmp_path, usage=never)
    assert got.path == tmp_path / "run" / "merged" and not got.tmpfs and got.note is None


def test_each_run_dir_has_its_own_folder(tmp_path):
    assert tmpfs_dir(tmp_path / "a", "demo", tmp_path) != tmpfs_dir(tmp_path / "b", "demo", tmp_path)
    assert tmpfs_dir(tmp_path / "a", "demo", tmp_path) == tmpfs_dir(tmp_path / "x" / ".." / "a", "demo", tmp_path)


def test_remove_tmpfs_removes_the_runs_folder_only_under_auto(tmp_path):
    shm, run = tmp_path / "shm", tmp_path / "run"
    folder = tmpfs_dir(run, "r", shm)
    (folder / "merged-1-000001").mkdir(parents=True)
    assert remove_tmpfs("/data/merged", run, "r", shm) is None and folder.is_dir()
    assert remove_tmpfs("auto", run, "r", shm) == folder and not folder.exists()
    assert remove_tmpfs("auto", run, "r", shm) is None  # nothing left: nothing to do


def test_the_default_is_auto_and_the_a100_config_names_its_folder():
    root = Path(__file__).resolve().parents[3]
    assert load_config(root / "configs/smoke.toml").policy_server.merged_dir == "auto"
    assert load_config(root / "configs/qwen1.5b-a100.toml").policy_server.merged_dir == "/tmp/fathom-merged"
