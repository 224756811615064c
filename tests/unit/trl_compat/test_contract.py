"""What FATHOM relies on in TRL's private API, one test per use (fathom/trl_compat/__init__.py lists them).

A TRL upgrade that renames, moves or changes one of them fails the test named after it, before a training run does.
"""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest
import torch
from openenv.core.harness import TrainingTrace, VerifyResult
from trl.experimental.async_grpo import async_grpo_trainer as agt
from trl.experimental.async_grpo import async_rollout_worker as arw
from trl.experimental.async_grpo import openenv_harness as oh

from fathom.trl_compat import TRL_VERSION, check_trl_version
from fathom.trl_compat.rollout import (ROLLOUT_REWARD, ROLLOUT_ROWS, ROW_TASK, HarnessLoop, HarnessWorker, chain_trace,
                                      tasks_of)
from fathom.trl_compat.trainer import GRPOTrainerBase, rollout_collator, vllm_named_params


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _turn(node: str, prompt: list[int], completion: list[int]) -> dict:
    return {"node_id": node, "prompt_token_ids": prompt, "completion_token_ids": completion,
            "per_token_logps": [-0.5] * len(completion), "loss_mask": [0] * len(prompt) + [1] * len(completion)}


# two turns of one conversation: turn 2's prompt extends turn 1's prompt + completion
TRACE = TrainingTrace.model_validate({"schema_version": 1, "turns": [_turn("c1", [1, 2], [3, 4]),
                                                                     _turn("c2", [1, 2, 3, 4, 5], [6])]})


def test_the_installed_trl_is_the_pinned_one():
    check_trl_version()
    import trl

    assert trl.__version__ == TRL_VERSION


# --- trace chaining: _turns_from_training_trace, _chain_to_sequences ------------------------------------------------
def test_chaining_functions_keep_their_signatures():
    assert _params(oh._turns_from_training_trace) == ["trace"]
    assert _params(arw._chain_to_sequences) == ["turns", "rollout_id", "fork_threshold"]


def test_a_conversation_that_extends_each_turn_chains_into_one_row():
    rows, tally = chain_trace(TRACE, "r1", 0)
    (row,) = rows
    assert row.input_ids == [1, 2, 3, 4, 5, 6] and row.rollout_id == "r1"
    assert row.completion_mask == [0, 0, 1, 1, 0, 1]
    assert row.old_log_probs == [0.0, 0.0, -0.5, -0.5, 0.0, -0.5]
    assert tally["clean"] == 1 and tally["fork"] == 0


# --- the rollout loop: _HarnessRolloutLoop._run_session / _score_group / _push_metrics / queues -----------------------
class _Session:
    """An OpenEnv TrainableSession whose episode is already over."""

    def __init__(self):
        self.closed = False

    def initial_messages(self):
        return []

    def list_tools(self):
        return []

    def call_tool(self, name, arguments):
        raise AssertionError("loop-owning mode calls no tools")

    def wait_for_completion(self, timeout_s=None):
        return 0

    def fetch_training_trace(self):
        return TRACE

    def verify(self, transcript, final_state=None):
        return VerifyResult(env_reward=1.0, done=True)

    def close(self):
        self.closed = True


def _bare_loop(factory) -> HarnessLoop:
    """A loop with only what `_run_session` reads (no child process, no vLLM)."""
    loop = object.__new__(HarnessLoop)
    loop._factory, loop._live_sessions, loop._adapter = factory, set(), None
    loop._stop_event = SimpleNamespace(is_set=lambda: False)
    loop._rollout_reward_fn, loop._fork_threshold_tokens = None, 0
    return loop


def test_run_session_hands_the_task_to_create_untouched_and_returns_rows_at_their_index():
    assert issubclass(oh._HarnessRolloutLoop, arw._AsyncRolloutLoop)
    assert _params(oh._HarnessRolloutLoop._run_session) == ["self", "prompt", "group_id"]
    created: list = []
    session = _Session()

    class Factory:
        def create(self, task, seed=None, episode_id=None):
            created.append((task, seed, episode_id))
            return session

    class Task:
        pass

    task = Task()
    loop = _bare_loop(Factory())
    loop.task_for = lambda prompt: task
    rollout, metrics = loop._run_session("needle-1k-s1", 7)
    (got,) = created
    assert got[0] is task and got[1] == 7  # the task object itself, and the group id as the seed
    rows = rollout[ROLLOUT_ROWS]
    assert len(rollout) == 6 and [r.input_ids for r in rows] == [[1, 2, 3, 4, 5, 6]]
    assert rows[0].rollout_id == got[2]  # TRL's rollout id is the episode id it gave the factory
    assert getattr(rows[0], ROW_TASK) is task and session.closed and metrics["turns"] == 2
    assert not hasattr(type(rows[0]), "__slots__")  # a row takes the task as an attribute


def test_run_session_verifies_the_session_before_it_returns_and_keeps_the_reward_functions_answer():
    """FATHOM's session writes the episode result into its task (the rollout's record) in verify(), and the loop logs
    it from there once `_run_session` returns (`after_rollout`): TRL's rollout reward function gets only the outcome's
    total. TRL logs rollout correctness only when a rollout reward function is given, so FATHOM gives one that
    forwards the total."""
    assert {"env_reward", "timed_out"} <= set(oh.HarnessRolloutOutcome.__dataclass_fields__)

    class Task:
        result = None

    task = Task()

    class Verifying(_Session):
        def verify(self, transcript, final_state=None):
            task.result = "verified"
            return VerifyResult(env_reward=0.25, done=True)

    class Factory:
        def create(self, task, seed=None, episode_id=None):
            return Verifying()

    loop = _bare_loop(Factory())
    loop.task_for = lambda prompt: task
    seen: list = []
    loop.after_rollout = lambda t, rollout: seen.append((t, t.result, rollout[ROLLOUT_REWARD]))
    loop._rollout_reward_fn = lambda outcome: outcome.env_reward
    _, metrics = loop._run_session("needle-1k-s1", 0)
    assert seen == [(task, "verified", 0.25)] and metrics["correctness"] == 0.25
    loop._rollout_reward_fn = None
    _, metrics = loop._run_session("needle-1k-s1", 0)
    assert seen[-1][2] == 0.25 and "correctness" not in metrics


def test_score_group_makes_one_sample_per_row_in_order():
    from accelerate import PartialState

    PartialState()  # TRL's loop logs through accelerate's logger, which needs a (single-process) state
    assert inspect.iscoroutinefunction(oh._HarnessRolloutLoop._score_group)
    assert {"completions_sequences", "group_id", "model_version"} <= set(arw.RolloutGroup.__slots__)
    rows_a = [arw.TrainingSequence([1, 2], [0, 1], [0.0, -1.0], "a"), arw.TrainingSequence([3], [1], [-1.0], "a")]
    rows_b = [arw.TrainingSequence([4, 5], [0, 1], [0.0, -1.0], "b")]
    for rows, task in ((rows_a, "task-a"), (rows_b, "task-b")):
        for r in rows:
            setattr(r, ROW_TASK, task)
    group = arw.RolloutGroup(prompts=[[], []], reward_kwargs={}, completions=[[], []], completions_ids=[[], []],
                             completions_sequences=[rows_a, rows_b], tool_call_counts=[0, 0],
                             tool_failure_counts=[0, 0], model_version=3, group_id=9, env_rewards=[],
                             rollout_rewards=[1.0, 0.0])
    loop = object.__new__(HarnessLoop)
    loop.reward_funcs, loop._env_reward_types, loop.reward_func_names = [], [], ["harness_reward"]
    seen: list = []
    loop.after_scoring = lambda g, samples, tasks: seen.append(tasks) or samples
    samples = asyncio.run(loop._score_group(group))
    assert [s.input_ids for s in samples] == [[1, 2], [3], [4, 5]]
    assert seen == [["task-a", "task-a", "task-b"]]
    assert all(isinstance(s.metrics, dict) and s.model_version == 3 for s in samples)  # metrics take extra keys
    with pytest.raises(RuntimeError, match="one sample per row"):
        tasks_of(group, samples[:2])


def test_the_loop_pushes_metrics_and_holds_its_queues_where_the_hooks_look():
    assert _params(arw._AsyncRolloutLoop._push_metrics) == ["self", "values"]
    init = inspect.getsource(arw._AsyncRolloutLoop.__init__)
    assert "self._metrics_queue = " in init and "self.rollout_buffer = " in init


def test_the_worker_builds_its_loop_from_loop_cls_and_keeps_its_child_process():
    assert oh.HarnessRolloutWorker._loop_cls is oh._HarnessRolloutLoop

    class Worker(HarnessWorker):
        loop_cls = HarnessLoop

    assert Worker._loop_cls is HarnessLoop
    assert "self._loop_cls" in inspect.getsource(arw.AsyncRolloutWorker.start)
    assert "self._process = None" in inspect.getsource(arw.AsyncRolloutWorker.__init__).replace(
        "self._process: mp.Process | None = None", "self._process = None")


# --- the trainer ------------------------------------------------------------------------------------------------------
def test_vllm_named_params_names_a_plain_models_weights_as_its_state_dict():
    assert _params(agt._iter_vllm_named_params) == ["model"]
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1, bias=False))
    assert [n for n, _ in vllm_named_params(model)] == list(model.state_dict())


def test_weight_transfer_says_whether_it_has_the_nccl_engine():
    from trl.experimental.async_grpo import weight_transfer

    assert isinstance(weight_transfer._HAS_STATEFUL_TRAINER_ENGINE, bool)


def test_the_trainer_syncs_in_sync_weight_and_logs_into_its_metrics_window():
    assert _params(agt.AsyncGRPOTrainer._sync_weight) == ["self"]
    # TRL syncs through this method at train begin and every weight_sync_steps (a bound method in a callback)
    assert "self._trainer._sync_weight()" in inspect.getsource(agt._TrainBeginCallback)
    assert "StepIntervalCallback(self._sync_weight" in inspect.getsource(agt.AsyncGRPOTrainer.__init__)
    assert 'self._metrics["train"]' in inspect.getsource(agt.AsyncGRPOTrainer)
    order: list[str] = []

    class Trainer(GRPOTrainerBase):
        def before_weight_sync(self):
            order.append("before")

        def after_weight_sync(self):
            order.append("after")

    trainer = object.__new__(Trainer)
    trainer._metrics = {"train": {"x": []}}
    trainer.log_metric("x", 1.0)
    assert trainer._metrics["train"]["x"] == [1.0]
    original = agt.AsyncGRPOTrainer._sync_weight
    agt.AsyncGRPOTrainer._sync_weight = lambda self: order.append("sync")
    try:
        trainer._sync_weight()
    finally:
        agt.AsyncGRPOTrainer._sync_weight = original
    assert order == ["before", "sync", "after"]


def test_the_rollout_collator_is_built_by_name_and_packs_samples_in_order():
    assert "DataCollatorForRollout(" in inspect.getsource(agt.AsyncGRPOTrainer.get_train_dataloader)
    collate = rollout_collator(agt.DataCollatorForRollout, {"v": "v_tokens"})(pad_token_id=0, num_processes=2)

    def ex(ids, v):
        return {"input_ids": ids, "completion_mask": [1] * len(ids), "old_log_probs": [0.0] * len(ids),
                "advantage": 0.0, "group_id": 0, "metrics": {"reward": 1.0, "v": v}}

    rows = [[ex([1, 2, 3], 5.0), ex([4], 6.0)], [ex([7, 8], 7.0)]]
    batch = collate([rows])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4], [7, 8, 0, 0]]
    got = batch["v_tokens"]
    assert got[0].tolist() == [5.0, 5.0, 5.0, 6.0] and got[1, :2].tolist() == [7.0, 7.0] and got[1, 2:].isnan().all()


def test_the_patched_globals_are_where_trl_looks_them_up():
    import trl.trainer.utils as trl_utils

    assert _params(agt.get_peak_flops_per_device) == ["accelerator", "dtype"]
    assert "get_peak_flops_per_device(" in inspect.getsource(agt)
    assert hasattr(trl_utils, "_ChunkedLogProbFunction")
    assert "_ChunkedLogProbFunction.apply(" in inspect.getsource(trl_utils)
    assert "is_vllm_available()" in inspect.getsource(arw.AsyncRolloutWorker.__init__)
    assert _params(agt.create_model_from_path)[:2] == ["model_id", "architecture"]
    assert 'attn_implementation="kernels-community/flash-attn3"' in inspect.getsource(agt)


def test_checkpoints_are_written_under_get_output_dir_by_save_checkpoint(tmp_path):
    from transformers import Trainer

    assert _params(Trainer._get_output_dir) == ["self", "trial"]
    assert _params(Trainer._save_checkpoint) == ["self", "model", "trial"]
    assert "self._get_output_dir(trial=trial)" in inspect.getsource(Trainer._save_checkpoint)
    seen: list = []

    class Trainer_(GRPOTrainerBase):
        def checkpoint_dir(self, run_dir):
            return run_dir + "/staging"

        def save_checkpoint(self, write, run_dir):
            seen.append(run_dir)
            write()

    trainer = object.__new__(Trainer_)
    trainer.args, trainer.hp_search_backend = SimpleNamespace(output_dir=str(tmp_path)), None
    original = agt.AsyncGRPOTrainer._save_checkpoint
    agt.AsyncGRPOTrainer._save_checkpoint = lambda self, model, trial: seen.append(self._get_output_dir(trial))
    try:
        trainer._save_checkpoint(None, None)
    finally:
        agt.AsyncGRPOTrainer._save_checkpoint = original
    assert seen == [str(tmp_path), f"{tmp_path}/staging"]  # the run's directory to the hook, the staged one to TRL


def _loss_and_grads(trainer, model, batch):
    model.zero_grad()
    loss = agt.AsyncGRPOTrainer.compute_loss(trainer, model, batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_a_shared_prefix_batch_gives_trls_loss_the_flat_batchs_loss_and_gradients():
    """The batch keys `drop_shared` cuts (TOKEN_KEYS) are all the per-token tensors TRL's compute_loss reads: on the
    shared-prefix batch it takes the same loss and gradients as on the flat one, from fewer forwarded tokens."""
    from collections import defaultdict

    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from fathom.trainer import cpu_compat
    from fathom.trainer.prefix_tree import share_row
    from fathom.trl_compat.trainer import TOKEN_KEYS

    cpu_compat.apply(force=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation=cpu_compat.SEGMENT_SDPA)
    model = LlamaForCausalLM(cfg).double()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    trainer = object.__new__(agt.AsyncGRPOTrainer)
    trainer.model, trainer.accelerator, trainer.aux_loss_enabled = model, Accelerator(cpu=True), False
    trainer.epsilon_low = trainer.epsilon_high = 0.2
    trainer.current_gradient_accumulation_steps = 1
    trainer._metrics = {"train": defaultdict(list)}
    for name in ("forward_tokens", "trained_tokens", "seq_len_weighted", "samples", "forward_s"):
        setattr(trainer, f"_step_{name}", 0.0)

    def ex(completion: list[int], advantage: float) -> dict:
        prompt = [5, 6, 7, 8, 9, 10]
        n = len(prompt) + len(completion)
        return {"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion),
                "old_log_probs": [-4.5] * n, "advantage": advantage, "group_id": 0, "metrics": {"reward": 1.0}}

    got, metrics = {}, defaultdict(list)
    for share in (None, share_row):
        rows = [[ex([11, 12, 13], 1.0), ex([14, 15], -1.0)], [ex([16], 0.5), ex([17, 18], -0.5), ex([19], 1.0)]]
        batch = rollout_collator(agt.DataCollatorForRollout, {}, share)(pad_token_id=0, num_processes=2,
                                                                       metrics=metrics)([rows])
        assert set(TOKEN_KEYS) == {k for k, v in batch.items() if v.shape == batch["input_ids"].shape}
        # one process: each row is scored as the rank it is dispatched to would score it
        got[share] = [_loss_and_grads(trainer, model, {k: v[i:i + 1] if v.shape == batch["input_ids"].shape else v
                                                       for k, v in batch.items()}) for i in range(2)]
        got[share, "forwarded"] = batch["global_n_forward_tokens"][0].item()
    assert got[share_row, "forwarded"] == got[None, "forwarded"] - 5 - 2 * 5  # the prompt once per row, bar one token
    assert metrics["batch/shared_prefix_frac"] == [(15.0, 39.0)]
    for (flat_loss, flat_grads), (loss, grads) in zip(got[None], got[share_row]):
        assert torch.allclose(loss, flat_loss, atol=1e-6)
        for a, b in zip(grads, flat_grads):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
