"""The pure-torch log-prob function against a reference log_softmax, per-sequence attention of packed rows against
the same sequences run alone, and the TRL version gate."""

from __future__ import annotations

import pytest
import torch

from fathom.trainer import cpu_compat
from fathom.trainer.cpu_compat import TorchChunkedLogProb, reference_log_softmax
from fathom.trainer.prefix_tree import tree_runs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_entropy_and_grads_match_log_softmax(temperature, monkeypatch):
    monkeypatch.setattr(cpu_compat, "TOKEN_CHUNK", 64)  # several tiles, one partial
    torch.manual_seed(0)
    h = torch.randn(150, 32, dtype=torch.float64, requires_grad=True)
    w = torch.randn(500, 32, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 500, (150,))
    lp, ent, sq, mean, top = TorchChunkedLogProb.apply(h, w, None, t, temperature, 4096, None, 1.0,
                                                       ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1"))
    logits = (h @ w.t()) / temperature
    ref = reference_log_softmax(h.double(), w, t, temperature).double()
    p = logits.softmax(-1)
    ref_ent = -(p * logits.log_softmax(-1)).sum(-1)
    assert torch.allclose(lp.double(), ref, atol=1e-5)
    assert torch.allclose(ent.double(), ref_ent, atol=1e-5)
    assert torch.allclose(sq.double(), torch.logsumexp(2 * logits.log_softmax(-1), -1), atol=1e-5)
    assert torch.allclose(mean.double(), logits.mean(-1), atol=1e-5)
    assert torch.equal(top, logits.argmax(-1) == t)
    g = torch.autograd.grad(lp.sum() + ent.sum(), [h, w])
    g_ref = torch.autograd.grad(ref.sum() + ref_ent.sum(), [h, w])
    for a, b in zip(g, g_ref):
        assert torch.allclose(a.double(), b, atol=1e-4)


def test_softcap_scale_and_bias_follow_trls_order():
    torch.manual_seed(1)
    h, w, b = torch.randn(10, 8), torch.randn(40, 8), torch.randn(40)
    t = torch.randint(0, 40, (10,))
    lp, *_ = TorchChunkedLogProb.apply(h, w, b, t, 0.5, 4096, 3.0, 2.0, ("log_probs",))
    z = 3.0 * torch.tanh((h @ w.t() + b) * 2.0 / 3.0) / 0.5
    assert torch.allclose(lp, z.log_softmax(-1).gather(-1, t[:, None]).squeeze(-1), atol=1e-5)


def test_unrequested_outputs_are_none_and_empty_input_keeps_the_graph():
    h = torch.randn(0, 8, requires_grad=True)
    lp, ent, sq, mean, top = TorchChunkedLogProb.apply(h, torch.randn(5, 8), None, torch.zeros(0, dtype=torch.long),
                                                       1.0, 4096, None, 1.0, ("log_probs",))
    assert lp.shape == (0,) and ent is None and sq is None and mean is None and top is None
    lp.sum().backward()


def test_wrong_trl_version_is_refused_with_the_fix(monkeypatch):
    import trl

    monkeypatch.setattr(trl, "__version__", "1.16.0")
    with pytest.raises(cpu_compat.TrlVersionError, match=r"pip install trl==1\.15\.0"):
        cpu_compat.check_trl_version()


def test_apply_patches_trl_for_cpu():
    assert cpu_compat.apply(force=True)
    import trl.trainer.utils as u
    from trl.experimental.async_grpo import async_grpo_trainer as agt

    assert u._ChunkedLogProbFunction is TorchChunkedLogProb
    assert agt.get_peak_flops_per_device(None, "bfloat16") == cpu_compat.CPU_PEAK_FLOPS["bfloat16"]
    from transformers import AttentionInterface

    assert AttentionInterface()[cpu_compat.SEGMENT_SDPA] is cpu_compat.segment_sdpa
    assert agt.create_model_from_path.__module__ == "fathom.trl_compat.trainer"  # TRL's hard-coded kernel is replaced


def test_segment_runs_split_where_positions_restart():
    # segment_sdpa attends one run at a time: a flat row's runs are its packed sequences, with no ancestors
    assert tree_runs(torch.tensor([0, 1, 2, 0, 1, 0])) == [(0, 3, []), (3, 5, []), (5, 6, [])]
    assert tree_runs(torch.tensor([5, 6, 7])) == [(0, 3, [])]  # one sequence, offset
    assert tree_runs(torch.tensor([0, 1, 2, 3])) == [(0, 4, [])]


def _tiny_llama(impl: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation=impl)
    return LlamaForCausalLM(cfg).double()


def test_segment_sdpa_packed_row_equals_each_sequence_alone():
    cpu_compat.apply(force=True)
    lengths = [7, 12, 5]
    torch.manual_seed(1)
    ids = torch.randint(0, 97, (1, sum(lengths)))
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    seg, ref = _tiny_llama(cpu_compat.SEGMENT_SDPA), _tiny_llama("sdpa")
    packed = seg(input_ids=ids, position_ids=pos, use_cache=False).logits
    alone = torch.cat([ref(input_ids=part, use_cache=False).logits for part in ids.split(lengths, dim=1)], dim=1)
    assert torch.allclose(packed, alone, atol=1e-10)
    # the same gradients as transformers' block-diagonal mask on the same packed row
    seg(input_ids=ids, position_ids=pos, labels=ids, use_cache=False).loss.backward()
    ref(input_ids=ids, position_ids=pos, labels=ids, use_cache=False).loss.backward()
    for a, b in zip(seg.parameters(), ref.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-10)
    # ignoring the resets would let a sequence attend to the one before it: the check above can fail
    whole = seg(input_ids=ids, use_cache=False).logits
    assert not torch.allclose(whole[:, lengths[0]:], alone[:, lengths[0]:], atol=1e-3)


def test_segment_sdpa_refuses_a_padding_mask():
    cpu_compat.apply(force=True)
    model = _tiny_llama(cpu_compat.SEGMENT_SDPA)
    ids = torch.randint(0, 97, (1, 6))
    with pytest.raises(ValueError, match="padding-free rows"):
        model(input_ids=ids, attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]), use_cache=False)


def _no_native_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)


def test_bf16_auto_follows_the_hardware(monkeypatch):
    _no_native_bf16(monkeypatch)
    assert cpu_compat.native_bf16() is False
    assert cpu_compat.use_bf16("auto", "sft.bf16") is False
    assert cpu_compat.use_bf16(False, "sft.bf16") is False
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert cpu_compat.use_bf16("auto", "sft.bf16") is True


def test_forced_bf16_without_native_support_warns_naming_the_setting(monkeypatch):
    _no_native_bf16(monkeypatch)
    with pytest.warns(UserWarning, match=r"trainer\.autocast_bf16 = true.*no native bf16"):
        assert cpu_compat.use_bf16(True, "trainer.autocast_bf16") is True


@pytest.mark.parametrize(("section", "field", "default"), [("sft", "bf16", "auto"), ("trainer", "autocast_bf16", False)])
def test_bf16_settings_take_auto_and_booleans(section, field, default):
    from fathom.config import load_config

    def value(*overrides):
        return getattr(getattr(load_config(None, list(overrides)), section), field)

    assert value() == default and type(value()) is type(default)
    assert value(f"--{section}.{field}", "auto") == "auto"
    assert value(f"--{section}.{field}", "false") is False
    with pytest.raises(Exception, match=field):
        value(f"--{section}.{field}", "sometimes")
