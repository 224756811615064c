"""bench/gpu_device_check.py on CPU, as the GPU machine would run it without `datasets` and `aiohttp`: TRL's
AsyncGRPOTrainer steps, the disk sync to a second process bit for bit, and the attention check all meet their
targets (with --device cpu), and the report names the import stand-ins it used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_device_check_meets_its_targets_on_cpu_with_import_stand_ins():
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'bench/device_shims'}", HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1")
    # What the GPU machine lacks besides TRL's own dependencies: fathom's config stack (pydantic) and vLLM.
    absent = "import runpy, sys; sys.modules.update(pydantic=None, vllm=None, openenv=None); " \
             "sys.argv = ['gpu_device_check.py', '--device', 'cpu', '--steps', '2']; " \
             "runpy.run_path('bench/gpu_device_check.py', run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", absent], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc.get("error") is None, doc.get("traceback")
    assert doc["import_stand_ins"] == ["datasets", "aiohttp"]
    assert {t["name"]: t["met"] for t in doc["targets"]} == {
        "trainer_steps_on_device": True, "sync_transfer_completes": True, "weights_bit_exact": True,
        "attention_fallback": True}
    tr = doc["trainer"]
    assert tr["steps"] == 2 and tr["syncs_sent"] == tr["syncs_received"] == 3  # cold sync + one per step
    assert tr["receiver"]["pid"] != str(os.getpid()) and tr["tensors_per_sync"] > 0
