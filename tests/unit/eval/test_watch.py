"""The checkpoint watcher: complete checkpoints only, each scored once (also across restarts), slots freed."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from fathom.eval.checkpoints import DirSource, adapter_complete, safetensors_complete, source_for
from fathom.eval.watch import Watcher


def write_adapter(d: Path, *, truncate: int = 0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * 16
    (d / "adapter_model.safetensors").write_bytes(blob[: len(blob) - truncate])
    return d


def test_completeness_is_checked_on_the_bytes(tmp_path):
    good = write_adapter(tmp_path / "good")
    half = write_adapter(tmp_path / "half", truncate=5)
    assert safetensors_complete(good / "adapter_model.safetensors") and adapter_complete(good)
    assert not adapter_complete(half)
    (good / "adapter_config.json").unlink()
    assert not adapter_complete(good)


def test_dir_source_sees_only_complete_named_checkpoints(tmp_path):
    ck = tmp_path / "run" / "checkpoints"
    write_adapter(ck / "checkpoint-5")
    write_adapter(ck / "checkpoint-10", truncate=3)       # mid-upload on a bucket
    write_adapter(ck / "checkpoint-15.tmp")               # being written, before the rename
    (ck / "checkpoint-20").mkdir()                        # empty
    assert set(DirSource(tmp_path / "run").complete()) == {5}
    assert set(DirSource(ck).complete()) == {5}
    late = DirSource(tmp_path / "late-run")  # watcher started before the trainer made its run dir
    assert late.complete() == {}
    write_adapter(tmp_path / "late-run" / "checkpoints" / "checkpoint-1")
    assert set(late.complete()) == {1}
    assert isinstance(source_for("runs/not-yet", tmp_path), DirSource)
    assert isinstance(source_for(str(tmp_path / "run"), tmp_path), DirSource)
    assert source_for("hf://me/adapters", tmp_path).describe() == "hf://me/adapters"


class FakeVllm:
    def __init__(self):
        self.loaded: list[str] = []
        self.calls: list[tuple[str, str]] = []

    def load(self, name, path):
        assert adapter_complete(Path(path)), "a half-written checkpoint was loaded"
        assert name not in self.loaded
        self.loaded.append(name)
        self.calls.append(("load", name))

    def unload(self, name):
        self.loaded.remove(name)
        self.calls.append(("unload", name))


def fake_eval(log):
    def evaluate(model, label):
        log.append((model, label))
        rate = 0.2 if model is None else 0.1 * int(label.split("-")[1]) / 5
        return {"model": model, "summary": {"pass@1": {"pass@1": rate, "ci": [rate - 0.1, rate + 0.1], "n": 10},
                                            "unscorable": 0, "tokens": {"mean_total": 900.0}, "stop_reasons": {"final": 10}},
                "rows": [{"task_id": f"t{i}", "scorable": True, "correct": i < rate * 10} for i in range(10)]}
    return evaluate


def make(tmp_path, vllm, log):
    t = [0.0]
    return Watcher(DirSource(tmp_path / "ck"), tmp_path / "eval", evaluate=fake_eval(log), load=vllm.load,
                   unload=vllm.unload, loaded=lambda: list(vllm.loaded), poll_s=5.0,
                   sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])


def test_each_checkpoint_once_across_restarts_and_base_once(tmp_path):
    vllm, log = FakeVllm(), []
    write_adapter(tmp_path / "ck" / "checkpoint-5")
    write_adapter(tmp_path / "ck" / "checkpoint-10", truncate=4)
    w = make(tmp_path, vllm, log)
    w.run(idle_exit_s=12)
    assert log == [(None, "base"), ("fathom-eval-ckpt-5", "checkpoint-5")]
    assert vllm.loaded == []  # unloaded after its eval: LoRA slots never run out
    # The half-written checkpoint finishes; a crash left an adapter loaded; the watcher restarts.
    write_adapter(tmp_path / "ck" / "checkpoint-10")
    vllm.loaded.append("fathom-eval-ckpt-10")
    vllm.loaded.append("trl-policy-v3")  # the trainer's: not ours to unload
    w2 = make(tmp_path, vllm, log)
    summary = w2.run(stop_at_step=10)
    assert log[2:] == [("fathom-eval-ckpt-10", "checkpoint-10")]  # base reused, 5 not redone
    assert vllm.loaded == ["trl-policy-v3"]
    assert [r["step"] for r in summary["checkpoints"]] == [5, 10] and summary["best"]["step"] == 10
    assert summary["checkpoints"][0]["delta_vs_base"] is not None
    out = tmp_path / "eval"
    assert json.loads((out / "summary.json").read_text())["base"]["pass@1"] == 0.2
    assert (out / "checkpoint-5.json").is_file() and (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_watcher_waits_through_a_stopped_trainer_and_picks_up_late_checkpoints(tmp_path):
    vllm, log = FakeVllm(), []
    w = make(tmp_path, vllm, log)
    w.clean_slots()
    w.base()
    for _ in range(3):
        assert w.poll_once() == []  # no checkpoints dir yet: nothing to do, no error
    write_adapter(tmp_path / "ck" / "checkpoint-1")
    assert w.poll_once() == [1]
    seen = next(e["t"] for e in w.events if e["event"] == "seen")
    started = next(e["t"] for e in w.events if e["event"] == "started")
    assert started - seen < 30


def test_a_failed_eval_still_unloads_is_retried_then_stops_loudly(tmp_path):
    vllm = FakeVllm()
    write_adapter(tmp_path / "ck" / "checkpoint-3")
    fails = [2]

    def flaky(model, label):
        if model is not None and fails[0] > 0:
            fails[0] -= 1
            raise RuntimeError("env server went away")
        return fake_eval([])(model, label)

    w = Watcher(DirSource(tmp_path / "ck"), tmp_path / "eval", evaluate=flaky, load=vllm.load, unload=vllm.unload,
                loaded=lambda: list(vllm.loaded), max_failures=3)
    w.base()
    assert w.poll_once() == [] and w.poll_once() == [] and vllm.loaded == [] and w.done_steps() == set()
    assert w.poll_once() == [3]  # third try works
    fails[0] = 99
    write_adapter(tmp_path / "ck" / "checkpoint-4")
    w.poll_once(), w.poll_once()
    with pytest.raises(RuntimeError, match="went away"):
        w.poll_once()
    assert vllm.loaded == [] and w.done_steps() == {3}


def test_hub_source_lists_complete_folders_and_downloads_each_once(tmp_path, monkeypatch):
    import huggingface_hub

    from fathom.eval.checkpoints import HubSource

    remote = tmp_path / "remote"
    write_adapter(remote / "checkpoint-2")
    write_adapter(remote / "checkpoint-4")
    (remote / "checkpoint-6").mkdir()
    (remote / "checkpoint-6" / "adapter_config.json").write_text("{}")  # upload half done on the Hub
    files = [str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file()] + ["README.md"]
    downloads = []

    def fake_snapshot(repo_id, revision=None, local_dir=None, allow_patterns=None):
        downloads.append(allow_patterns)
        folder = allow_patterns[0].split("/")[0]
        shutil.copytree(remote / folder, Path(local_dir) / folder, dirs_exist_ok=True)
        return local_dir

    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo_id, revision=None: files)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    hub = HubSource("me/run", tmp_path / "cache")
    assert hub.steps() == [2, 4]
    assert set(hub.complete()) == {2, 4} and set(hub.complete()) == {2, 4}
    assert downloads == [["checkpoint-2/*"], ["checkpoint-4/*"]]  # the second poll downloads nothing


def test_a_report_cut_off_mid_write_is_scored_again_once_and_nothing_is_renamed(tmp_path, monkeypatch):
    # On a bucket the watcher writes in place; a stop mid-write leaves JSON that does not parse.
    vllm, log = FakeVllm(), []
    write_adapter(tmp_path / "ck" / "checkpoint-5")
    write_adapter(tmp_path / "ck" / "checkpoint-10")
    out = tmp_path / "eval"
    out.mkdir()
    whole = json.dumps({"step": 5, "summary": {}})
    (out / "checkpoint-5.json").write_text(whole[: len(whole) // 2])
    renames = []
    monkeypatch.setattr(Path, "replace", lambda self, target: renames.append((self, target)))
    monkeypatch.setattr(Path, "rename", lambda self, target: renames.append((self, target)))
    w = make(tmp_path, vllm, log)
    assert w.done_steps() == set()
    w.run(stop_at_step=10)
    assert log == [(None, "base"), ("fathom-eval-ckpt-5", "checkpoint-5"), ("fathom-eval-ckpt-10", "checkpoint-10")]
    assert json.loads((out / "checkpoint-5.json").read_text())["step"] == 5
    assert renames == [] and not list(out.glob("*.tmp"))
    make(tmp_path, vllm, log).run(stop_at_step=10)  # a restart on the same bucket redoes nothing
    assert len(log) == 3
