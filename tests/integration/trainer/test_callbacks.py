"""Watchdog (in a child process: it interrupts the main thread), metrics.jsonl, plots."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from fathom.rollout_worker.rewards import RolloutLog
from fathom.trainer.callbacks import WATCHDOG_EXIT, MetricsJsonl, Watchdog
from fathom.trainer.plot import PlotError, plot_run

STALLED = textwrap.dedent("""
    import sys, time
    from types import SimpleNamespace
    from fathom.trainer.callbacks import Watchdog
    wd = Watchdog(1.0, grace_s=3, poll_s=0.2)
    wd.on_train_begin(None, SimpleNamespace(global_step=4), None)
    try:
        time.sleep(60)  # a step stuck in C never sees the interrupt: the watchdog exits after grace_s
    except KeyboardInterrupt:
        sys.exit(3 if wd.tripped else 1)
""")


def test_stalled_step_trips_the_watchdog_loudly():
    p = subprocess.run([sys.executable, "-c", STALLED], capture_output=True, text=True, timeout=300)
    assert p.returncode == WATCHDOG_EXIT
    assert "no optimizer step" in p.stderr and "after step 4" in p.stderr and "trainer.watchdog_s" in p.stderr


def test_steps_keep_the_watchdog_quiet():
    tripped = []
    wd = Watchdog(0.5, poll_s=0.05, on_trip=lambda: tripped.append(1))
    wd.on_train_begin(None, SimpleNamespace(global_step=0), None)
    for i in range(10):
        time.sleep(0.1)
        wd.on_step_end(None, SimpleNamespace(global_step=i), None)
    wd.stop()
    assert not tripped and wd.tripped is None


def test_metrics_rows_fold_in_new_rollouts_and_plot(tmp_path):
    log = RolloutLog(tmp_path / "rollouts.jsonl")
    m = MetricsJsonl(tmp_path, tmp_path / "rollouts.jsonl")
    log.write({"unscorable": False, "reward": 0.5, "reward/total": 0.5, "reward/format": 1.0, "turns": 3, "subcalls": 2})
    log.write({"unscorable": True, "reward": None})
    m.on_log(None, SimpleNamespace(global_step=1), None, logs={"loss": 0.1, "kl": 0.01, "reward": 0.5,
                                                               "mismatch/abs_ratio_minus_1": 2e-6, "nan": float("nan")})
    m.on_log(None, SimpleNamespace(global_step=2), None, logs={"loss": 0.2})
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["rollouts/unscorable_total"] == 1 and rows[0]["reward/format"] == 1.0
    assert rows[0]["episode/subcalls_mean"] == 2 and "nan" not in rows[0]
    assert rows[1]["rollouts/count"] == 0  # each rollout counted once
    names = {p.name for p in plot_run(tmp_path)}
    assert {"reward.png", "loss.png", "kl.png", "mismatch.png", "reward_components.png", "subcalls.png"} <= names


def test_plot_names_a_missing_metrics_file(tmp_path):
    with pytest.raises(PlotError, match="metrics.jsonl does not exist"):
        plot_run(tmp_path)


def test_progress_prints_a_line_a_step_without_a_terminal(capsys, monkeypatch):
    from fathom.trainer.callbacks import RichProgress

    for var in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    bar = RichProgress(3)
    bar.on_train_begin(None, SimpleNamespace(global_step=0), None)
    for step, reward in ((1, 0.25), (1, 0.25), (2, float("nan")), (3, 0.5)):
        bar.on_log(None, SimpleNamespace(global_step=step), None, logs={"reward": reward})
    bar.on_train_end(None, SimpleNamespace(global_step=3), None)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("train step")]
    assert lines == ["train step 1/3 reward 0.250", "train step 2/3", "train step 3/3 reward 0.500"]


def test_plot_draws_the_learning_dynamics_one_line_per_family(tmp_path):
    rows = [{"step": s, "train_success/needle": 0.5 + 0.1 * s, "train_rollouts/needle": 4.0,
             "train_success/kv_chain": 0.25 * s, "rollout/group_reward_std": 0.3, "rollout/flat_group_frac": 0.5,
             "rollout/sampled_nll": 0.4, "ratio": 1.0, "is_ratio/min": 0.8, "is_ratio/max": 1.3,
             "drift/lora_delta_norm": 0.01 * s, "sample/staleness_mean": 0.5, "train/context_chars_mean": 9000.0}
            for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from fathom.trainer.plot import chart_keys

    # the prefix expands to the families some row holds, and only those under it
    assert chart_keys(["train_success/*", "kl"], rows) == ["train_success/kv_chain", "train_success/needle", "kl"]
    names = {p.name for p in plot_run(tmp_path)}
    assert {"train_success.png", "group_signal.png", "sampled_nll.png", "is_ratio.png", "drift_from_start.png",
            "staleness.png", "task_length.png"} <= names
    assert "kl.png" not in names  # no row holds it: no empty chart
    assert (tmp_path / "plots" / "train_success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
