"""Shared-prefix rows: the layout `share_row` picks, the tree `tree_runs` reads back, and that `segment_sdpa` on such a
row scores and trains every sample exactly as the flat row does."""

from __future__ import annotations

import torch

from fathom.trainer import cpu_compat
from fathom.trainer.prefix_tree import share_row, tree_runs


def _sample(prompt: list[int], completion: list[int]) -> dict:
    return {"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)}


def test_each_sample_drops_what_it_shares_with_the_one_before_but_no_trained_token():
    a, b = _sample([1, 2, 3, 4], [9, 9]), _sample([1, 2, 3, 4], [5, 6])
    c = _sample([1, 2, 7], [8])  # shares [1, 2] only
    d = _sample([1, 2, 3, 4], [5, 6])  # the same tokens as b
    ordered, drops = share_row([a, b, c, d])
    assert ordered == [b, d, a, c]  # sorted by token ids: neighbours share the most
    # the predecessor of the first trained token (position 3) is kept; c keeps its own token 7
    assert drops == [0, 3, 3, 2]


def test_a_sample_trained_from_its_first_tokens_drops_nothing():
    a, b = _sample([], [1, 2, 3]), _sample([], [1, 2, 4])
    assert share_row([a, b])[1] == [0, 0]


def test_flat_rows_are_sequences_of_their_own():
    assert tree_runs([0, 1, 2, 0, 1, 0]) == [(0, 3, []), (3, 5, []), (5, 6, [])]
    assert tree_runs([5, 6, 7]) == [(0, 3, [])]  # an offset row: nothing to continue


def test_a_branch_continues_the_path_of_the_latest_tokens_at_its_depths():
    # root 0..3, branch at depth 3 (after tokens 0..2), a deeper branch at depth 4 of the second, a branch at depth 1
    pos = [0, 1, 2, 3, 4, 3, 4, 5, 4, 1, 2]
    assert tree_runs(pos) == [(0, 5, []), (5, 8, [0, 1, 2]), (8, 9, [0, 1, 2, 5]), (9, 11, [0])]


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation=cpu_compat.SEGMENT_SDPA)
    return LlamaForCausalLM(cfg).double()


def _rows(samples: list[dict], drops: list[int]):
    """The packed row (ids, positions) and, per trained token, the row index of its predecessor and its id."""
    ids, pos, pred, target, at = [], [], [], [], 0
    for s, d in zip(samples, drops):
        n = len(s["input_ids"])
        ids += s["input_ids"][d:]
        pos += list(range(d, n))
        for p in range(1, n):
            if s["completion_mask"][p]:
                assert p - 1 >= d  # the predecessor of every trained token is in the row
                pred.append(at + p - 1 - d)
                target.append(s["input_ids"][p])
        at += n - d
    return torch.tensor([ids]), torch.tensor([pos]), torch.tensor(pred), torch.tensor(target)


def test_a_shared_prefix_row_scores_and_trains_each_sample_as_the_flat_row_does():
    cpu_compat.register_segment_sdpa()
    torch.manual_seed(1)
    prompt = torch.randint(0, 97, (9,)).tolist()
    samples = [_sample(prompt, torch.randint(0, 97, (n,)).tolist()) for n in (5, 3, 6, 4)]
    samples.append(_sample(prompt[:6], [1, 2]))  # shares part of the prompt only
    ordered, drops = share_row(samples)
    assert sum(drops) >= 3 * 8  # the prompt is forwarded once, not per sample
    model = _tiny_llama()
    got = {}
    for name, d in (("flat", [0] * len(ordered)), ("shared", drops)):
        ids, pos, pred, target = _rows(ordered, d)
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        lp = torch.log_softmax(logits[pred], -1).gather(-1, target[:, None])[:, 0]
        model.zero_grad()
        lp.sum().backward()
        got[name] = lp.detach(), [p.grad.clone() for p in model.parameters()]
        assert ids.shape[1] == sum(len(s["input_ids"]) - x for s, x in zip(ordered, d))
    assert torch.allclose(got["shared"][0], got["flat"][0], atol=1e-10)
    # Llama's RMSNorm runs in fp32 even in a double model, and a shared token's gradient is summed over its samples
    # before that norm's backward instead of after: fp32 rounding (seen: 1.2e-7 on gradients of up to 3.8)
    for a, b in zip(got["shared"][1], got["flat"][1]):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    # read as flat sequences (positions restarting), the branches would lose their prompt: the check above can fail
    ids, pos, pred, target = _rows(ordered, drops)
    restart = torch.cat([torch.arange(e - s) for s, e, _ in tree_runs(pos[0])])[None]
    logits = model(input_ids=ids, position_ids=restart, use_cache=False).logits[0]
    wrong = torch.log_softmax(logits[pred], -1).gather(-1, target[:, None])[:, 0]
    assert not torch.allclose(wrong.detach(), got["flat"][0], atol=1e-3)
