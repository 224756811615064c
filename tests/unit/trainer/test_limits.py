"""The limits arithmetic: FLOP counts against torch's own FLOP counter on a tiny LoRA model, decode bytes and
FLOPs by hand, fractions, and the measurements' shape (not their speed)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fathom.trainer import limits

H, INTER, V, LAYERS, HEADS, KV, R = 32, 64, 100, 2, 4, 2, 4
HEAD_DIM = H // HEADS


def tiny(lora: bool, tied: bool = True):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=H, intermediate_size=INTER, vocab_size=V, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=R, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                                 task_type="CAUSAL_LM"))
    return model


# per layer: q (H x H), k and v (H x KV*HEAD_DIM), o (H x H), gate/up/down (H x INTER each); then the head (V x H)
KV_OUT = KV * HEAD_DIM
BASE = LAYERS * (2 * H * H + 2 * H * KV_OUT + 3 * H * INTER) + V * H
LORA = LAYERS * (R * (H + H) + R * (H + KV_OUT) + R * (INTER + H))


def test_linear_weights_counts_base_and_lora_once():
    assert limits.linear_weights(tiny(False)) == (0, BASE)  # a bare model trains every linear
    assert limits.linear_weights(tiny(True)) == (BASE, LORA)


def test_train_flops_match_torch_flop_counter_on_the_linears():
    model = tiny(True)
    n = 7
    # Embeddings that need a gradient, so layer 0's input gradients are computed too, as in every later layer.
    emb = model.get_input_embeddings()(torch.randint(0, V, (1, n))).detach().requires_grad_(True)
    with FlopCounterMode(display=False) as fc:
        out = model(inputs_embeds=emb, labels=torch.randint(0, V, (1, n)), use_cache=False)
        out.loss.backward()
    counts = fc.get_flop_counts()["Global"]
    linear = sum(v for op, v in counts.items() if "mm" in str(op) and "bmm" not in str(op))
    frozen, trainable = limits.linear_weights(model)
    no_attention = limits.train_flops(frozen, trainable, LAYERS, HEADS, HEAD_DIM, [n]) - 3 * 2 * LAYERS * HEADS * HEAD_DIM * n * (n + 1)
    assert linear == no_attention


def test_full_fine_tuning_is_six_times_params_and_attention_is_causal():
    assert limits.train_flops(0, 1000, 1, 1, 1, [1]) == 6 * 1000 + 3 * 2 * 1 * 2
    # 3 tokens attend to 1 + 2 + 3 = 6 keys; QK^T and AV cost 2 x 2 x heads x head_dim each; backward 2x forward.
    attn = limits.train_flops(0, 0, 2, 4, 8, [3])
    assert attn == 3 * 6 * 4 * 4 * 8 * 2
    # two packed sequences attend within themselves, not across
    assert limits.train_flops(0, 0, 1, 1, 1, [3, 3]) == 2 * limits.train_flops(0, 0, 1, 1, 1, [3])
    assert limits.train_flops(0, 0, 1, 1, 1, [6]) > limits.train_flops(0, 0, 1, 1, 1, [3, 3])


def test_a_branch_attends_to_its_shared_prefix_as_the_end_of_its_whole_sequence_would():
    # 3 tokens after a 12-token prefix forwarded elsewhere in the row attend to 13 + 14 + 15 keys
    assert limits.train_flops(0, 0, 1, 1, 1, [3], [12]) == 3 * 4 * (13 + 14 + 15)
    assert (limits.train_flops(0, 0, 2, 4, 8, [3], [12])
            == limits.train_flops(0, 0, 2, 4, 8, [15]) - limits.train_flops(0, 0, 2, 4, 8, [12]))
    # a prefix once and two branches: less than two whole sequences, by the prefix's linear and attention work
    shared = limits.train_flops(10, 2, 1, 1, 1, [15, 3], [0, 12])
    assert shared == limits.train_flops(10, 2, 1, 1, 1, [15, 15]) - limits.train_flops(10, 2, 1, 1, 1, [12])


def test_decode_bytes_and_flops():
    kv = limits.kv_bytes_per_token(30, 3, 64, "float32")
    assert kv == 2 * 30 * 3 * 64 * 4
    # 8 sequences share one read of the weights per step; each reads its own cache
    assert limits.decode_bytes_per_token(800, 8, kv, 10.0) == 100 + kv * 10
    assert limits.decode_bytes_per_token(800, 1, 0, 0) == 800
    with pytest.raises(ValueError, match="concurrency 0"):
        limits.decode_bytes_per_token(800, 0, kv, 10.0)
    assert limits.decode_flops_per_token(1000, 2, 3, 4, 5.0) == 2000 + 4 * 2 * 3 * 4 * 5


def test_streamed_params_skip_the_embedding_table_unless_the_head_is_tied():
    tied, untied = tiny(False, tied=True), tiny(False, tied=False)
    total = sum(p.numel() for p in untied.parameters())
    assert limits.streamed_params(untied) == total - V * H  # the table's rows are looked up, the head read whole
    assert limits.streamed_params(tied) == sum(p.numel() for p in tied.parameters())


def test_attention_shape_reads_the_config():
    assert limits.attention_shape(tiny(False).config) == (LAYERS, HEADS, KV, HEAD_DIM)


def test_fraction():
    assert limits.fraction(40.0, 100.0) == 0.4
    assert limits.fraction(None, 100.0) is None
    assert limits.fraction(1.0, 0.0) is None


def test_measure_reports_positive_rates_on_the_given_cores_and_restores_the_mask():
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    core = sorted(before)[0]
    got = limits.measure("float32", [core], seconds=0.05, copy_bytes=1 << 20)
    assert got["cores"] == [core] and got["threads"] == 1
    assert got["matmul_peak_flop_s"] > 0 and got["copy_bytes_s"] > 0
    assert os.sched_getaffinity(0) == before and torch.get_num_threads() == threads
    with pytest.raises(ValueError, match="int8"):
        limits.matmul_peak("int8", 0.01, (8,))
