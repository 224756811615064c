"""`fathom sft`'s recording of one teacher episode: which episodes give rows, and the family each row names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fathom.entrypoints.sft_cmd import record_episode

ROW = {"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}


class _Factory:
    def __init__(self, correct: bool, finish: str = "stop"):
        self.correct, self.finish = correct, finish

    def create(self, task_id):
        trace = SimpleNamespace(turns=[SimpleNamespace(metadata={"finish_reason": self.finish})])
        result = SimpleNamespace(reward_components=SimpleNamespace(correct=self.correct), turns=[1],
                                 stop_reason="final")
        return SimpleNamespace(wait_for_completion=lambda: None, fetch_training_trace=lambda: trace,
                               verify=lambda _: SimpleNamespace(env_reward=0.7 if self.correct else 0.0),
                               close=lambda: None, result=result)


@pytest.fixture(autouse=True)
def _rows(monkeypatch):
    monkeypatch.setattr("fathom.trainer.sft.rows_from_trace", lambda trace: [dict(ROW)])


def test_a_solved_episode_gives_rows_tagged_with_the_task_family():
    rows, summary = record_episode(_Factory(True), "kv_chain-16k-s500001", 4096)
    assert rows == [{**ROW, "family": "kv_chain"}]
    assert summary["rows"] == 1 and summary["correct"]


@pytest.mark.parametrize("factory, max_length", [(_Factory(False), 4096), (_Factory(True, "length"), 4096),
                                                  (_Factory(True), 2)])
def test_unsolved_cut_or_too_long_episodes_give_no_rows(factory, max_length):
    rows, summary = record_episode(factory, "code_qa-2k-s500002", max_length)
    assert rows == [] and summary["rows"] == 0
