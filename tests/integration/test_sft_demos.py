"""`fathom sft` on user-supplied demonstrations alone (no teacher, no servers): the tiny model's own tokenizer lays
them out, and TRL's SFTTrainer trains an adapter on exactly those rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.env_server_stack import ROOT
from tests.unit.env_server.test_demos import demo


def test_sft_trains_on_demonstrations_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    demos = tmp_path / "demos.jsonl"
    demos.write_text("".join(json.dumps(demo()) + "\n" for _ in range(4)))
    out = tmp_path / "sft"
    r = subprocess.run([sys.executable, "-m", "fathom.entrypoints.cli", "sft", "--out", str(out),
                        "--model.name", str(tiny_model_dir), "--sft.teacher", "false",
                        "--sft.demonstrations", str(demos), "--sft.epochs", "1", "--sft.bf16", "false",
                        "--sft.batch_size", "2", "--trainer.lora.rank", "4", "--trainer.lora.alpha", "8"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=os.environ)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 demonstrations from" in r.stderr
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(any(x != -100 for x in row["labels"]) for row in rows)
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    # on CPU each step's two rows (the same conversation) go as one packed row: their prompt is forwarded once
    metrics = json.loads((out / "sft_metrics.json").read_text())
    assert metrics["share_prefix"] is True and 0 < metrics["forwarded_token_frac"] < 1
    printed = " ".join(r.stderr.split())  # rich wraps long lines
    assert f"forwarded {metrics['forwarded_token_frac']:.0%} of the rows' tokens, shared prefixes once" in printed
