"""`fathom launch`'s plan and `run_job.sh`'s dry run: what runs, in which order, with which settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.config import load_config
from fathom.stack.plan import PlanError, plan, slow_cpu_note

ROOT = Path(__file__).resolve().parents[3]


def _names(steps):
    return [(s.kind, s.name) for s in steps]


def test_plan_starts_servers_then_sft_grpo_eval() -> None:
    cfg = load_config(ROOT / "configs/smoke.toml")
    steps = plan(cfg, "configs/smoke.toml", ["--trainer.max_steps", "3"])
    assert _names(steps) == [("server", "policy"), ("server", "proxy"), ("server", "env"),
                             ("stage", "sft"), ("stage", "grpo"), ("restart", "policy"), ("stage", "eval")]
    assert steps[0].health_url == f"http://127.0.0.1:{cfg.policy_server.port}/health"
    assert steps[1].health_url == f"http://127.0.0.1:{cfg.capture_proxy.port}/healthz"
    grpo = steps[4].argv
    assert grpo[grpo.index("--trainer.init_adapter") + 1] == str(cfg.run_dir / "sft" / "adapter")
    assert grpo[-1] == "--keep-merged"  # the launcher removes the tmpfs merged weights, after the evaluation
    assert all(s.argv[s.argv.index("-c") + 1:][:3] == ["configs/smoke.toml", "--trainer.max_steps", "3"] for s in steps)
    ev = steps[6].argv
    assert [ev[i + 1] for i, a in enumerate(ev) if a == "--stage"] == [
        "base", f"sft={cfg.run_dir / 'sft' / 'adapter'}", f"grpo={cfg.run_dir / 'final'}"]


def test_a_starting_adapter_skips_sft() -> None:
    cfg = load_config(ROOT / "configs/smoke.toml", ["--trainer.init_adapter", "/adapters/warm"])
    steps = plan(cfg, "configs/smoke.toml", [])
    assert ("stage", "sft") not in _names(steps)
    grpo = next(s for s in steps if s.name == "grpo").argv
    assert grpo[grpo.index("--trainer.init_adapter") + 1] == "/adapters/warm"
    ev = steps[-1].argv
    assert [ev[i + 1] for i, a in enumerate(ev) if a == "--stage"] == ["base", "init=/adapters/warm",
                                                                        f"grpo={cfg.run_dir / 'final'}"]


def test_a_bad_sft_phrasing_setting_stops_the_plan_before_any_server() -> None:
    from fathom.stack.plan import PlanError

    cfg = load_config(ROOT / "configs/smoke.toml", ["--sft.question_phrasings.needle", "[8]"])
    with pytest.raises(PlanError, match=r"sft.question_phrasings\['needle'\]"):
        plan(cfg, "configs/smoke.toml", [])
    started = load_config(ROOT / "configs/smoke.toml", ["--sft.question_phrasings.needle", "[8]",
                                                        "--trainer.init_adapter", "/adapters/warm"])
    assert ("stage", "sft") not in _names(plan(started, "configs/smoke.toml", []))  # no SFT stage, nothing to check


def _arg(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_sft_anchor_reads_the_sft_stage_rows() -> None:
    cfg = load_config(ROOT / "configs/smoke.toml", ["--trainer.sft_anchor_coef", "0.5"])
    grpo = next(s for s in plan(cfg, "configs/smoke.toml", []) if s.name == "grpo").argv
    assert _arg(grpo, "--trainer.sft_anchor_data") == str(cfg.run_dir / "sft" / "data.jsonl")
    off = load_config(ROOT / "configs/smoke.toml", ["--trainer.sft_anchor_coef", "0"])
    assert _arg(next(s for s in plan(off, "configs/smoke.toml", []) if s.name == "grpo").argv,
                "--trainer.sft_anchor_data") is None


def test_the_sft_anchor_with_a_starting_adapter_reads_the_rows_beside_it_or_named(tmp_path) -> None:
    from fathom.stack.plan import PlanError

    adapter = tmp_path / "sft" / "adapter"
    adapter.mkdir(parents=True)
    over = ["--trainer.sft_anchor_coef", "0.5", "--trainer.init_adapter", str(adapter)]

    def anchor_arg(extra=()):
        cfg = load_config(ROOT / "configs/smoke.toml", over + list(extra))
        return _arg(next(s for s in plan(cfg, "configs/smoke.toml", []) if s.name == "grpo").argv,
                    "--trainer.sft_anchor_data")

    with pytest.raises(PlanError, match="has no data.jsonl beside it"):
        anchor_arg()
    assert anchor_arg(["--trainer.sft_anchor_data", "/elsewhere/data.jsonl"]) == "/elsewhere/data.jsonl"
    (tmp_path / "sft" / "data.jsonl").write_text("{}\n")
    assert anchor_arg() == str(tmp_path / "sft" / "data.jsonl")


def test_the_evaluation_gets_its_own_policy_cores() -> None:
    over = ["--launch.eval_policy_cores", "0-1", "--policy_server.cpu_cores", "0", "--trainer.cpu_cores", "1"]
    cfg = load_config(ROOT / "configs/smoke.toml", over)
    steps = plan(cfg, "configs/smoke.toml", over)
    assert _names(steps)[-2:] == [("restart", "policy"), ("stage", "eval")]
    first, again = steps[0].argv, steps[-2].argv
    assert _arg(first, "--policy_server.cpu_cores") == "0" and steps[-2].health_url == steps[0].health_url
    # the last override wins, and the restarted server's config drops the trainer's cores it would overlap
    assert again[-3:] == ["--policy_server.cpu_cores", "0-1", "--trainer.cpu_cores="]
    restarted = load_config(ROOT / "configs/smoke.toml", again[again.index("-c") + 2:])
    assert restarted.policy_server.cpu_cores == "0-1" and restarted.trainer.cpu_cores == ""

    alone = load_config(ROOT / "configs/smoke.toml", [*over, "--launch.stages", '["eval"]'])
    steps = plan(alone, "configs/smoke.toml", [])  # nothing runs before the evaluation: start vLLM there at once
    assert _names(steps) == [("server", "policy"), ("server", "proxy"), ("server", "env"), ("stage", "eval")]
    assert _arg(steps[0].argv, "--policy_server.cpu_cores") == "0-1"

    same = load_config(ROOT / "configs/smoke.toml", ["--launch.eval_policy_cores", cfg.policy_server.cpu_cores])
    assert "restart" not in [s.kind for s in plan(same, "configs/smoke.toml", [])]
    with pytest.raises(Exception, match="eval_policy_cores"):
        load_config(ROOT / "configs/smoke.toml", ["--launch.eval_policy_cores", "1-0"])


def test_eval_watch_runs_beside_grpo() -> None:
    cfg = load_config(ROOT / "configs/smoke.toml", ["--launch.eval_watch", "true", "--launch.stages", '["grpo"]'])
    assert _names(plan(cfg, "configs/smoke.toml", [])) == [
        ("server", "policy"), ("server", "proxy"), ("server", "env"), ("server", "eval-watch"), ("stage", "grpo")]


@pytest.mark.parametrize("flags, slow", [("fpu avx2 fma", True), ("avx2 avx512f avx512_bf16", False),
                                         ("avx2 amx_bf16 amx_tile", False)])
def test_a_cpu_run_without_native_bf16_says_it_will_be_slow(tmp_path: Path, flags: str, slow: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    cfg = load_config(ROOT / "configs/smoke.toml", ["policy_server.device=cpu"])
    note = slow_cpu_note(cfg, str(cpuinfo))
    assert (note is not None) == slow
    if slow:
        assert str(cpuinfo) in note and "fp32" in note


def test_a_gpu_run_says_nothing_about_cpu_bf16(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: avx2\n")
    cfg = load_config(ROOT / "configs/smoke.toml", ["policy_server.device=cuda"])
    assert slow_cpu_note(cfg, str(cpuinfo)) is None


def test_run_job_dry_run_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    env = dict(os.environ, DRY_RUN="1", MAX_STEPS="20", ADAPTER_REPO="someone/fathom-lora",
               CHECKPOINT_DIR=str(tmp_path / "bucket"), PY=str(ROOT / ".venv/bin/python"))
    out = subprocess.run(["bash", str(ROOT / "run_job.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "+ make setup-gpu" in lines
    doctor = [x for x in lines if " doctor --gpu -c configs/qwen1.5b-a100.toml" in x]
    assert doctor and lines.index(doctor[0]) > lines.index("+ make setup-gpu")  # checked before the hour-long job
    assert lines.index(doctor[0]) < lines.index(next(x for x in lines if x.startswith("+ ") and " launch " in x))
    launch = [x for x in lines if x.startswith("+ ") and " launch configs/qwen1.5b-a100.toml" in x]
    assert launch and "--trainer.max_steps 20" in launch[0] and f"--launch.bucket_dir {tmp_path / 'bucket'}" in launch[0]
    assert f"run dir: runs/qwen1.5b-a100 (local disk), copied as complete files to {tmp_path / 'bucket'}" in out.stdout
    assert any("stage grpo" in x for x in lines) and any("server policy" in x for x in lines)
    push = [x for x in lines if x.startswith("+ ") and "--push someone/fathom-lora" in x]
    assert push and " export runs/qwen1.5b-a100 " in push[0]  # from the local run; the bucket holds a copy
    assert not (tmp_path / "bucket").exists()  # nothing ran


def test_the_evaluation_scores_the_split_it_is_given() -> None:
    cfg = load_config(ROOT / "configs/smoke.toml", ["--eval.split", "test"])
    steps = plan(cfg, "configs/smoke.toml", ["--eval.split", "test"])
    assert all(s.argv[s.argv.index("--eval.split") + 1] == "test" for s in steps)  # servers, stages, restart
    bad = load_config(ROOT / "configs/smoke.toml", ["--eval.split", "tset"])
    with pytest.raises(PlanError, match="eval.split .*'tset' is unknown"):
        plan(bad, "configs/smoke.toml", [])
    # a plan without an evaluation never reads the split
    plan(load_config(ROOT / "configs/smoke.toml", ["--eval.split", "tset", "--launch.stages", '["sft"]']),
         "configs/smoke.toml", [])


def test_launch_split_option_reaches_every_stage_in_the_dry_run() -> None:
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    out = CliRunner().invoke(app, ["launch", "configs/smoke.toml", "--eval.n_tasks", "20", "--split", "test",
                                   "--dry-run"])
    assert out.exit_code == 0, out.output
    lines = [x for x in out.output.splitlines() if x[:1].isdigit()]
    assert lines and all("--eval.n_tasks 20 --eval.split test" in x for x in lines)
    bad = CliRunner().invoke(app, ["launch", "configs/smoke.toml", "--split", "nope", "--dry-run"])
    assert bad.exit_code == 2 and "'nope' is unknown" in bad.output


def test_a_run_that_compares_grpo_with_its_start_can_skip_the_base_model() -> None:
    over = ["--trainer.init_adapter", "/adapters/warm", "--launch.stages", '["grpo", "eval"]',
            "--launch.eval_base", "false"]
    steps = plan(load_config(ROOT / "configs/smoke.toml", over), "configs/smoke.toml", over)
    ev = steps[-1].argv
    assert [ev[i + 1] for i, a in enumerate(ev) if a == "--stage"] == ["init=/adapters/warm",
                                                                        f"grpo={load_config(ROOT / 'configs/smoke.toml').run_dir / 'final'}"]
    nothing = ["--launch.stages", '["eval"]', "--launch.eval_base", "false"]
    with pytest.raises(PlanError, match="no stage to score"):
        plan(load_config(ROOT / "configs/smoke.toml", nothing), "configs/smoke.toml", nothing)


def test_each_split_says_what_its_score_is_for() -> None:
    from fathom.stack.plan import split_use

    assert "choosing" in split_use("test") and "never choose" in split_use("heldout")


def _dry_run(*overrides: str):
    """`fathom launch --dry-run` in-process (Typer's runner): it only computes and prints the plan."""
    from typer.testing import CliRunner

    from fathom.entrypoints.cli import app

    return CliRunner().invoke(app, ["launch", str(ROOT / "configs/qwen1.5b-a100.toml"), "--dry-run", *overrides])


def test_the_a100_dry_run_shows_the_one_gpu_sync_and_refuses_the_impossible_ones() -> None:
    out = _dry_run()
    assert out.exit_code == 0, out.output
    first = out.stdout.splitlines()[0]
    assert first.startswith("weight sync: merged by disk reload") and "trainer on cuda:0, vLLM on cuda:0" in first
    nccl = _dry_run("--policy_server.merged_sync", "nccl")
    assert nccl.exit_code != 0 and not nccl.stdout
    assert all(f in nccl.stderr for f in ("policy_server.cuda_device", "trainer.cuda_device", "merged_sync = 'disk'"))
    assert "merged over NCCL" in _dry_run("--policy_server.merged_sync", "nccl", "--trainer.cuda_device", "1").stdout
    # adapter sync: TRL needs max_staleness + 2 adapter slots (select_adapter_sync); a100 sets max_staleness 4
    short = _dry_run("--policy_server.weight_sync", "adapter", "--policy_server.max_loras", "5")
    assert short.exit_code != 0 and "policy_server.max_loras (5)" in short.stderr and "trainer.max_staleness" in short.stderr
    assert "weight sync: adapter" in _dry_run("--policy_server.weight_sync", "adapter", "--policy_server.max_loras",
                                              "6").stdout


def test_run_steps_runs_stages_in_order_and_ends_on_a_failed_one(tmp_path) -> None:
    import io

    from rich.console import Console

    from fathom.stack.plan import Step
    from fathom.stack.run import run_steps
    from fathom.stack.supervisor import LaunchError

    cfg = load_config(ROOT / "configs/smoke.toml", ["--output_dir", str(tmp_path)])
    marks = tmp_path / "marks"
    write = "import sys; open(sys.argv[1], 'a').write(sys.argv[2])"
    console = Console(file=io.StringIO(), width=200)
    took = run_steps(cfg, [Step("stage", "a", [sys.executable, "-c", write, str(marks), "a"]),
                           Step("stage", "b", [sys.executable, "-c", write, str(marks), "b"])], console)
    assert marks.read_text() == "ab" and set(took) == {"a", "b"}
    with pytest.raises(LaunchError, match="bad"):
        run_steps(cfg, [Step("stage", "bad", [sys.executable, "-c", "raise SystemExit(3)"]),
                        Step("stage", "c", [sys.executable, "-c", write, str(marks), "c"])], console)
    assert marks.read_text() == "ab"  # nothing runs after a failed stage


def test_the_tmpfs_merged_weights_outlive_every_stage_and_go_when_the_launcher_stops(tmp_path, monkeypatch) -> None:
    import io

    from rich.console import Console

    from fathom.stack.plan import Step
    from fathom.stack.run import run_steps
    from fathom.trainer import merged_dir

    monkeypatch.setattr(merged_dir, "SHM", tmp_path / "shm")
    cfg = load_config(ROOT / "configs/smoke.toml", ["--output_dir", str(tmp_path)])
    folder = merged_dir.tmpfs_dir(cfg.run_dir, cfg.run_name)
    weights, marks = folder / "merged-1-000001", tmp_path / "marks"
    write = "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.mkdir(parents=True); (p / 'w').write_text('x')"
    # the stage after the trainer (the evaluation, whose vLLM restart reloads them) still finds them
    look = "import pathlib, sys; open(sys.argv[2], 'w').write(str(pathlib.Path(sys.argv[1], 'w').is_file()))"
    console = Console(file=io.StringIO(), width=200)
    run_steps(cfg, [Step("stage", "grpo", [sys.executable, "-c", write, str(weights)]),
                    Step("stage", "eval", [sys.executable, "-c", look, str(weights), str(marks)])], console)
    assert marks.read_text() == "True" and not folder.exists()
    assert f"removed the merged weights in {folder}" in console.file.getvalue()

    # a launcher that failed removes them too
    from fathom.stack.supervisor import LaunchError

    with pytest.raises(LaunchError):
        run_steps(cfg, [Step("stage", "grpo", [sys.executable, "-c", write, str(weights)]),
                        Step("stage", "bad", [sys.executable, "-c", "raise SystemExit(3)"])], console)
    assert not folder.exists()


def test_a_launcher_stopped_by_sigterm_removes_the_tmpfs_merged_weights(tmp_path) -> None:
    import signal
    import time

    from fathom.trainer import merged_dir

    shm, out = tmp_path / "shm", tmp_path / "runs"
    cfg = load_config(ROOT / "configs/smoke.toml", ["--output_dir", str(out)])
    folder = merged_dir.tmpfs_dir(cfg.run_dir, cfg.run_name, shm)
    launcher = f"""
import io, pathlib, sys
from rich.console import Console
from fathom.config import load_config
from fathom.stack.plan import Step
from fathom.stack.run import run_steps
from fathom.trainer import merged_dir
merged_dir.SHM = pathlib.Path({str(shm)!r})
cfg = load_config({str(ROOT / "configs/smoke.toml")!r}, ["--output_dir", {str(out)!r}])
stage = "import pathlib, time; p = pathlib.Path({str(folder / "merged-1-000001")!r}); p.mkdir(parents=True); time.sleep(120)"
run_steps(cfg, [Step("stage", "grpo", [sys.executable, "-c", stage])], Console(file=io.StringIO()))
"""
    proc = subprocess.Popen([sys.executable, "-c", launcher], env=os.environ | {"PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not folder.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and not folder.exists()
