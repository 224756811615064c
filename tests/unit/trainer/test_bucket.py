"""The run on local disk, copied to a bucket as complete files: what the eval watcher on another machine sees."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from types import SimpleNamespace

from fathom.eval.checkpoints import DirSource
from fathom.trainer import bucket
from fathom.trainer.callbacks import BucketCopy


def checkpoint(run: Path, step: int) -> Path:
    d = run / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (d / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\1" * 16)
    (d / "optimizer.pt").write_bytes(b"x" * 100)
    (d / "trainer_state.json").write_text("{}")
    return d


def test_copy_writes_each_directorys_weights_last_skips_staging_and_copies_once(tmp_path, monkeypatch):
    run, dst = tmp_path / "run", tmp_path / "bucket"
    checkpoint(run, 5)
    (run / "merged" / "merged-1-000001").mkdir(parents=True)
    (run / "merged" / "merged-1-000001" / "model.safetensors").write_bytes(b"big")
    (run / ".vllm_lora").mkdir()
    (run / "checkpoint-10.tmp").mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    order = []
    real = shutil.copyfile
    monkeypatch.setattr(shutil, "copyfile", lambda s, d: (order.append(Path(d).relative_to(dst)), real(s, d))[1])
    bucket.copy_tree(run, dst)
    ck = [str(p) for p in order if p.parts[0] == "checkpoint-5"]
    assert ck[-1] == "checkpoint-5/adapter_model.safetensors" and len(ck) == 4
    assert {p.parts[0] for p in order} == {"checkpoint-5", "metrics.jsonl"}  # no merged/, .vllm_lora, *.tmp
    assert bucket.copy_tree(run, dst) == []  # nothing changed: nothing copied
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 2}\n')
    assert bucket.copy_tree(run, dst) == [dst / "metrics.jsonl"]
    assert (dst / "metrics.jsonl").read_text().count("step") == 2


def test_the_watcher_never_sees_a_half_copied_checkpoint(tmp_path, monkeypatch):
    run, dst = tmp_path / "run", tmp_path / "bucket" / "r"
    checkpoint(run, 5)
    real = shutil.copyfile

    def dies_mid_weights(s, d):
        if str(d).endswith(".safetensors"):
            Path(d).write_bytes(Path(s).read_bytes()[:20])  # the copy stops partway (job killed, mount hiccup)
            raise OSError(5, "Input/output error")
        return real(s, d)

    monkeypatch.setattr(shutil, "copyfile", dies_mid_weights)
    assert bucket.copy_run(run, dst) == []  # logged, not raised
    assert (dst / "checkpoint-5" / "adapter_config.json").is_file()
    assert DirSource(dst).complete() == {}  # present but incomplete: not loaded
    monkeypatch.setattr(shutil, "copyfile", real)
    bucket.copy_run(run, dst)  # the next copy finishes it (its size differs from the original)
    assert list(DirSource(dst).complete()) == [5]


def test_the_trainer_callback_copies_each_save_and_the_run_at_the_end(tmp_path):
    run, dst = tmp_path / "run", tmp_path / "bucket" / "r"
    checkpoint(run, 5)
    (run / "metrics.jsonl").write_text('{"step": 5}\n')
    cb = BucketCopy(dst, run)
    cb.on_save(None, SimpleNamespace(global_step=5), None)
    assert list(DirSource(dst).complete()) == [5] and (dst / "metrics.jsonl").is_file()
    (run / "final").mkdir()
    (run / "final" / "adapter_config.json").write_text("{}")
    cb.on_train_end(None, SimpleNamespace(global_step=5), None)
    assert (dst / "final" / "adapter_config.json").is_file()
    assert bucket.bucket_run_dir("", "r") is None and bucket.bucket_run_dir("/data/runs", "r") == Path("/data/runs/r")
