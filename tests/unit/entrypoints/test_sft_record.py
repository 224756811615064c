"""`fathom sft`'s recording of one teacher episode: which episodes give rows, and the family each row names."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fathom.trainer.sft_record import record_episode

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


def _sft(**over):
    from fathom.config.sft import SftConfig

    return SftConfig(**{"n_tasks": 24, "families": ["needle", "kv_chain", "code_qa"], "lengths": [2048, 16384],
                        **over})


def test_sft_tasks_keep_only_the_named_question_phrasings():
    from fathom.tasks.sft_tasks import sft_task_ids
    from fathom.tasks.generate import get_task, question_phrasing
    from fathom.tasks.record import parse_id

    every = sft_task_ids(_sft())
    assert every[:3] == ["needle-2k-s500000", "kv_chain-2k-s500001", "code_qa-2k-s500002"]
    kept = sft_task_ids(_sft(question_phrasings={"needle": [0, 1], "kv_chain": [2]}))
    assert len(kept) == len(set(kept)) == 24
    assert [t.split("-")[0] for t in kept] == [t.split("-")[0] for t in every]  # same family and length order
    assert [t.split("-")[1] for t in kept] == [t.split("-")[1] for t in every]
    phr = {t: question_phrasing(get_task(t)) for t in kept}
    assert {phr[t] for t in kept if t.startswith("needle")} <= {0, 1}
    assert {phr[t] for t in kept if t.startswith("kv_chain")} == {2}
    assert all(phr[t] is None for t in kept if t.startswith("code_qa"))
    # a family the setting does not name keeps exactly its tasks; a narrowed slot stays on its own seeds
    assert [t for t in kept if t.startswith("code_qa")] == [t for t in every if t.startswith("code_qa")]
    assert all((parse_id(t)[1] - 500_000) % 24 == i for i, t in enumerate(kept))
    # without the setting the same seeds give other phrasings too, so the filter did something
    assert {question_phrasing(get_task(t)) for t in every if t.startswith("needle")} - {0, 1}


def test_sft_tasks_past_the_train_seed_block_name_the_settings():
    from fathom.tasks.sft_tasks import sft_task_ids

    with pytest.raises(ValueError, match=r"sft.seed = 999990 with sft.n_tasks = 24: SFT task 10 \(kv_chain\)"):
        sft_task_ids(_sft(seed=999_990))


@pytest.mark.parametrize("phrasings, match", [
    ({"code_qa": [0]}, "'code_qa', whose questions have no train phrasings"),
    ({"needle": [8]}, r"indices from 0 to 7 \(the 8 train phrasings of needle\)"),
    ({"kv_chain": []}, r"kv_chain.*\[\]: give one or more indices"),
    ({"essay": [0]}, "task family 'essay' is unknown"),
])
def test_bad_question_phrasings_name_the_entry(phrasings, match):
    from fathom.tasks.sft_tasks import sft_task_ids

    with pytest.raises(ValueError, match=match):
        sft_task_ids(_sft(question_phrasings=phrasings))
