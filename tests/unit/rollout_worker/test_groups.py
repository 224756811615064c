"""The rollout child's group switches: flat groups dropped or kept whole; episode lengths balanced in the loss."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker, _HarnessRolloutLoop

from fathom.rollout_worker.groups import (MIXED, POLICY_VERSION, FathomRolloutLoop, FathomRolloutWorker,
                                          episode_keys, group_metrics, is_flat, length_balance)
from fathom.protocol import EpisodeResult
from fathom.rollout_worker.record import RolloutRecord
from fathom.rollout_worker.rewards import RolloutLog, read_new
from fathom.trl_compat.rollout import ROW_TASK


SAME_COMPLETION = [{"role": "assistant", "content": "FINAL(x)"}]
"""Every row's `completion`: what tells conversations apart is the episode id in their records, never this object."""


def _row(advantage: float, episode: str, trained: int, untrained: int = 5, version: int = 0,
         reward: float | None = None, logprob: float = -0.5) -> SimpleNamespace:
    return SimpleNamespace(advantage=advantage, completion=SAME_COMPLETION, episode=episode,
                           completion_mask=[0] * untrained + [1] * trained,
                           old_log_probs=[0.0] * untrained + [logprob] * trained, model_version=version,
                           metrics={"reward": advantage if reward is None else reward})


def _keys(rows: list) -> list[str]:
    return [r.episode for r in rows]


def _score(monkeypatch, samples: list, **switches) -> tuple[list, list]:
    async def parent_score(self, group):
        return samples

    monkeypatch.setattr(_HarnessRolloutLoop, "_score_group", parent_score)
    loop = object.__new__(FathomRolloutLoop)  # no child process: only the override runs
    loop.drop_flat_groups = switches.get("drop_flat_groups", False)
    loop.balance_lengths = switches.get("balance_lengths", False)
    pushed: list[dict] = []
    loop._push_metrics = pushed.append
    # one RolloutRecord per conversation (the sample's episode), holding the id and versions its session recorded;
    # TRL's group holds each conversation's training rows, one per sample, and each row carries its record
    versions = switches.get("versions", {})
    records = {s.episode: RolloutRecord("p", s.episode, versions.get(s.episode)) for s in samples}
    rows = [[SimpleNamespace(**{ROW_TASK: records[s.episode]})] for s in samples]
    kept = asyncio.run(loop._score_group(SimpleNamespace(group_id=7, completions_sequences=rows)))
    return kept, pushed


def _group(advantages: list[float], trained: list[int]) -> list:
    return [_row(a, f"ep{i}", n) for i, (a, n) in enumerate(zip(advantages, trained, strict=True))]


def test_flat_group_is_dropped_and_counted(monkeypatch):
    kept, pushed = _score(monkeypatch, _group([0.0] * 4, [10] * 4), drop_flat_groups=True)
    assert kept == []
    assert len(pushed) == 1 and pushed[0]["rollout/flat_group_frac"] == (1.0, 1.0)
    # a dropped group still shows in the spread and the sampled NLL
    assert pushed[0]["rollout/group_reward_std"] == 0.0 and pushed[0]["rollout/sampled_nll"] == (20.0, 40.0)


def test_flat_group_is_kept_when_the_switch_is_off(monkeypatch):
    samples = _group([0.0] * 4, [10] * 4)
    kept, pushed = _score(monkeypatch, samples)
    assert kept == samples
    assert len(pushed) == 1 and pushed[0]["rollout/flat_group_frac"] == (1.0, 1.0)


def test_group_with_signal_is_kept_whole(monkeypatch):
    # one right of four: TRL's normalised advantages; the zero-advantage case inside a group stays
    kept, pushed = _score(monkeypatch, _group([1.732, -0.577, -0.577, -0.577], [10] * 4), drop_flat_groups=True)
    assert [s.advantage for s in kept] == [1.732, -0.577, -0.577, -0.577]
    assert len(pushed) == 1 and pushed[0]["rollout/flat_group_frac"] == (0.0, 1.0)


def test_group_metrics_spread_over_conversations_and_nll_over_trained_tokens():
    # the wrong conversation forked into two rows; the crashed one is unscorable (NaN) and leaves the spread
    rows = [_row(1.0, "right", 2, reward=0.7, logprob=-0.1), _row(-1.0, "wrong", 3, reward=0.0, logprob=-1.0),
            _row(-1.0, "wrong", 1, reward=0.0, logprob=-2.0), _row(0.0, "crashed", 0, reward=float("nan"))]
    out = group_metrics(rows, _keys(rows))
    assert out["rollout/group_reward_std"] == pytest.approx(0.35)  # rewards 0.7 and 0.0, population std
    nll, tokens = out["rollout/sampled_nll"]
    assert tokens == 6 and nll == pytest.approx(0.2 + 3.0 + 2.0)  # untrained (mask 0) tokens never count
    assert group_metrics([_row(0.0, "e", 0, reward=float("nan"))], ["e"]) == {}


def test_is_flat():
    assert is_flat([0.0, 0.0])
    assert is_flat([])
    assert not is_flat([0.0, 1e-6])


def test_balanced_group_pushes_up_as_hard_as_down(monkeypatch):
    # the measured shape: one right episode of 300 trained tokens, three wrong ones that ran to the turn limit
    lengths = [300, 900, 900, 900]
    right, wrong = 3**0.5, -(3**-0.5)  # TRL's advantages for rewards [0.7, 0, 0, 0]
    samples = _group([right, wrong, wrong, wrong], lengths)
    token_push = sum(s.advantage * n for s, n in zip(samples, lengths, strict=True))
    assert token_push < -1000  # TRL's token sum: the wrong episodes dominate

    kept, pushed = _score(monkeypatch, samples, balance_lengths=True)
    token_push = sum(s.advantage * n for s, n in zip(kept, lengths, strict=True))
    assert token_push == pytest.approx(0.0, abs=1e-6)  # advantages summed to 0, so the balanced token sum does too
    assert kept[0].advantage == pytest.approx(right * 750 / 300)
    assert kept[1].advantage == pytest.approx(wrong * 750 / 900)
    assert pushed[-1] == {"rollout/length_balance_max_scale": pytest.approx(2.5)}


def test_balance_is_off_by_default_and_skips_flat_groups(monkeypatch):
    kept, _ = _score(monkeypatch, _group([1.732, -0.577, -0.577, -0.577], [300, 900, 900, 900]))
    assert [s.advantage for s in kept] == [1.732, -0.577, -0.577, -0.577]
    kept, pushed = _score(monkeypatch, _group([0.0] * 4, [300, 900, 900, 900]), balance_lengths=True)
    assert [s.advantage for s in kept] == [0.0] * 4
    assert len(pushed) == 1  # only the flat count


def test_forked_conversation_counts_its_rows_together():
    # the wrong episode forked into two rows of 400 and 500 trained tokens: one episode of 900
    rows = [_row(1.0, "right", 300), _row(-1.0, "wrong", 400), _row(-1.0, "wrong", 500)]
    assert length_balance(rows, _keys(rows)) == pytest.approx(2.0)  # mean 600 over 300
    assert [r.advantage for r in rows] == pytest.approx([2.0, -600 / 900, -600 / 900])


def test_episode_without_trained_tokens_is_left_alone():
    rows = [_row(1.0, "a", 300), _row(-1.0, "b", 0), _row(-1.0, "c", 600)]
    length_balance(rows, _keys(rows))
    assert [r.advantage for r in rows] == pytest.approx([1.5, -1.0, -0.75])
    assert length_balance([_row(1.0, "a", 300)], ["a"]) == 1.0


def test_samples_take_their_episodes_oldest_version_and_a_sync_inside_one_is_flagged(monkeypatch):
    # TRL stamped the group's version (3) on every row; the episodes ran at 3, across the 3 -> 4 sync, and at 4.
    rows = [_row(1.0, "same", 10, version=3), _row(-1.0, "spans", 10, version=3),
            _row(-1.0, "spans", 10, version=3), _row(1.0, "later", 10, version=3)]
    versions = {"same": (3, 3), "spans": (3, 4), "later": (4, 4)}
    kept, _ = _score(monkeypatch, rows, versions=versions)
    assert [r.model_version for r in kept] == [3, 3, 3, 4]
    assert [r.metrics[MIXED] for r in kept] == [0.0, 1.0, 1.0, 0.0]
    # what the trainer reads per token: the one version of the sample, never a mixed one
    got = [r.metrics[POLICY_VERSION] for r in kept]
    assert got[0] == 3.0 and math.isnan(got[1]) and math.isnan(got[2]) and got[3] == 4.0


def test_an_episode_without_recorded_versions_keeps_trls_stamp(monkeypatch):
    kept, _ = _score(monkeypatch, [_row(1.0, "a", 10, version=5), _row(-1.0, "b", 10, version=5)])
    assert [r.model_version for r in kept] == [5, 5] and all(MIXED not in r.metrics for r in kept)
    assert [r.metrics[POLICY_VERSION] for r in kept] == [5.0, 5.0]


def test_run_session_hands_the_session_a_record_that_every_row_of_the_rollout_carries(monkeypatch, tmp_path):
    rows = [SimpleNamespace(), SimpleNamespace()]  # a conversation that forked into two training rows
    seen: list = []

    def parent_run(self, task, group_id=0):
        seen.append(task)  # TRL passes it to the session factory's create(); the session fills in what it read
        task.policy_versions = (2, 3)
        task.result = EpisodeResult(episode_id="e1", task_id="needle-1k-s1", status="done", reward=0.7,
                                    metadata={"group": group_id})
        return ([{"role": "assistant", "content": "x"}], [], rows, 0, 0, 0.7), {"turns": 2}

    monkeypatch.setattr(_HarnessRolloutLoop, "_run_session", parent_run)
    loop = object.__new__(FathomRolloutLoop)
    loop.rollout_log = RolloutLog(tmp_path / "rollouts.jsonl")
    rollout, metrics = loop._run_session("needle-1k-s1", 4)
    (record,) = seen
    assert isinstance(record, RolloutRecord) and record.prompt == "needle-1k-s1"
    assert [getattr(r, ROW_TASK) for r in rollout[2]] == [record, record] and record.policy_versions == (2, 3)
    # the rollout is logged from the result its own record holds, once TRL's rollout has returned
    (line,), _ = read_new(tmp_path / "rollouts.jsonl", 0)
    assert (line["episode_id"], line["reward"], line["group"], line["timed_out"]) == ("e1", 0.7, 4, False)

    def failed_run(self, task, group_id=0):  # a failed rollout has no rows; the next one gets a fresh record
        seen.append(task)
        return ([], [], [], 0, 0, None), None

    monkeypatch.setattr(_HarnessRolloutLoop, "_run_session", failed_run)
    loop._run_session("needle-1k-s1")
    assert seen[1] is not record and seen[1].policy_versions is None and seen[1].result is None
    assert len(read_new(tmp_path / "rollouts.jsonl", 0)[0]) == 1  # never verified: not logged


def test_the_spawned_child_runs_our_loop_with_the_switches():
    # TRL's worker is a handle; its child builds `_loop_cls` with the worker's keywords.
    assert FathomRolloutWorker._loop_cls is FathomRolloutLoop
    assert issubclass(FathomRolloutWorker, HarnessRolloutWorker)
    loop = object.__new__(FathomRolloutLoop)
    log = RolloutLog("rollouts.jsonl")
    with pytest.raises(TypeError):  # switches are consumed before TRL's constructor sees the rest
        FathomRolloutLoop.__init__(loop, drop_flat_groups=True, balance_lengths=True, rollout_log=log,
                                   not_a_trl_keyword=1)
    assert loop.drop_flat_groups and loop.balance_lengths and loop.rollout_log is log


def test_conversations_group_by_the_episode_id_in_their_record_never_by_their_completion_object(monkeypatch):
    # Two episodes whose rows share one completion object stay apart; one episode whose two rows hold different
    # (equal) completion objects is counted whole.
    shared = SAME_COMPLETION
    rows = [_row(1.0, "ep-right", 300), _row(-1.0, "ep-wrong", 400), _row(-1.0, "ep-wrong", 500)]
    rows[2].completion = list(shared)
    assert rows[0].completion is rows[1].completion and rows[1].completion is not rows[2].completion
    kept, pushed = _score(monkeypatch, rows, balance_lengths=True)
    assert [r.advantage for r in kept] == pytest.approx([2.0, -600 / 900, -600 / 900])
    assert pushed[-1] == {"rollout/length_balance_max_scale": pytest.approx(2.0)}


def test_a_sample_without_its_rollouts_record_stops_scoring_with_a_clear_error():
    assert episode_keys([RolloutRecord("p", "ep-1"), RolloutRecord("q", "ep-2")]) == ["ep-1", "ep-2"]
    with pytest.raises(RuntimeError, match="RolloutRecord of an episode"):
        episode_keys([RolloutRecord("p", "ep-1"), None])
    with pytest.raises(RuntimeError, match="RolloutRecord of an episode"):
        episode_keys([RolloutRecord("p")])  # never handed to a session: no episode id
