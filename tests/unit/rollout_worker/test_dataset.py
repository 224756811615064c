import pytest

from fathom.rollout_worker.dataset import training_task_ids
from fathom.tasks.record import parse_id


def test_train_families_keeps_only_those_families():
    ids = training_task_ids(60, 2**14, ["needle", "kv_chain"])
    families = {parse_id(t)[0] for t in ids}
    assert families == {"needle", "kv_chain"}
    every = training_task_ids(60, 2**14)
    assert {parse_id(t)[0] for t in every} > families
    assert set(ids) < set(every)


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="needel"):
        training_task_ids(10, None, ["needel"])


def test_order_seed_shuffles_each_family_and_keeps_families_round_robin():
    plain = training_task_ids(60, 2**14, ["needle", "kv_chain"])
    a = training_task_ids(60, 2**14, ["needle", "kv_chain"], order_seed=1)
    assert sorted(a) == sorted(plain) and a != plain
    assert a == training_task_ids(60, 2**14, ["needle", "kv_chain"], order_seed=1)  # a seed is one order
    assert a != training_task_ids(60, 2**14, ["needle", "kv_chain"], order_seed=2)
    fams = [parse_id(t)[0] for t in a]
    n = min(fams.count("needle"), fams.count("kv_chain"))
    assert fams[: 2 * n] == [fams[0], fams[1]] * n and set(fams[:2]) == {"needle", "kv_chain"}
