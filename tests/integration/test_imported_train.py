"""One real GRPO step on the tiny model over an imported split only: TRL's AsyncGRPOTrainer + LoRA, its rollout
worker driving episodes of `mydocs-N` ids on a separately started env server that reads them from the task store.

Slow: it starts the stack test_trainer.py starts and trains as it does, on other task ids. The default run covers
each part on its own: test_trainer.py the GRPO steps through that stack, test_imported_tasks.py a separately
started env server serving and scoring `mydocs-N` ids from the store (real proxy and sandbox), and
tests/unit/tasks/test_store.py an imported-only training id list. The trainer passes ids, never a task's content.
"""

from __future__ import annotations

import json

import pytest

from fathom.config.tasks import TaskSource
from fathom.rollout_worker.dataset import training_task_ids
from fathom.tasks import store
from fathom.trainer.merged_dir import remove_tmpfs
from tests.integration.test_trainer import train_config
from tests.integration.train_stack import merged_stack


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(train_vllm, tmp_path_factory):
    from fathom.trainer.build import Endpoints, build_trainer

    tmp = tmp_path_factory.mktemp("imported-train")
    store_dir = tmp / "store"
    src = tmp / "mydocs.jsonl"
    src.write_text("".join(json.dumps({"question": f"What is the code of box {i}?",
                                       "context": f"Box {i} holds code {100 + i}. " + "Nothing else here. " * 40,
                                       "answer": 100 + i}) + "\n" for i in range(8)))
    store.set_root(store_dir)
    try:
        store.import_source(TaskSource(name="mydocs", kind="jsonl", path=str(src)))
        ids = training_task_ids(8, 4096, imported=[("mydocs", 1.0)], generated_weight=0.0)
        model_dir = train_vllm.model_dir
        with merged_stack(tmp, train_vllm.base_url, "fathom-base", tokenizer=model_dir,
                          extra_toml=f'\n[tasks]\nstore_dir = "{store_dir}"\n') as stack:
            cfg = train_config(model_dir, stack, tmp / "runs" / "one-step", **{"trainer.max_steps": 1})
            run = build_trainer(cfg, model_path=str(model_dir), progress=False,
                                endpoints=Endpoints(stack.vllm_url, stack.proxy_url, stack.env_url), task_ids=ids)
            try:
                run.trainer.train()
                yield run, ids
            finally:  # what `fathom train` does when it stops
                remove_tmpfs(cfg.policy_server.merged_dir, cfg.run_dir, cfg.run_name)
    finally:
        store.set_root(None)


def test_one_grpo_step_on_imported_tasks(trained):
    run, ids = trained
    assert ids == [f"mydocs-{i}" for i in range(8)]
    assert run.trainer.state.global_step == 1
    rollouts = [json.loads(line) for line in run.rollouts_path.read_text().splitlines()]
    scored = [r for r in rollouts if not r["unscorable"]]
    assert scored and all(r["task_id"].startswith("mydocs-") for r in rollouts)
    assert all(r["reward"] is not None and "reward/correctness" in r for r in scored)
    rows = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in row and "kl" in row for row in rows)
