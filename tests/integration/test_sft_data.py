"""SFT data: the teacher speaks the served model's tokens, and the loss covers the assistant's tokens only.

Uses the tiny model's tokenizer and chat template (TRL's Qwen2.5 template); no model runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from openenv.core.harness.training import TrainingTrace, TrainingTurn
from transformers import AutoTokenizer

from fathom.env_server.server import prompts
from fathom.env_server.server.tokens import ChatTokens
from fathom.env_server.scripted import create_scripted_app, scripted_reply, wrong_attempt
from fathom.tasks import generate, reference_solution
from fathom.trainer.sft import IGNORE, rows_from_trace


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _conversation(question: str) -> list[dict[str, str]]:
    return prompts.initial_messages(question, "x" * 5000, 300)


def _turn(i: int, prompt: list[int], completion: list[int]) -> TrainingTurn:
    return TrainingTurn(node_id=f"c{i}", prompt_token_ids=prompt, completion_token_ids=completion,
                        per_token_logps=[0.0] * len(completion),
                        loss_mask=[0] * len(prompt) + [1] * len(completion), metadata={"trainable": True})


def test_loss_mask_covers_exactly_the_assistant_turns(tok) -> None:
    a1, a2 = "```repl\nprint(len(context))\n```", "```repl\nFINAL('42')\n```"
    feedback = prompts.repl_feedback(["5000"], 3)
    msgs = _conversation("What is the magic number?")
    chat = ChatTokens(tok, "tiny")  # the harness's own token-space prompt builder
    p0 = chat.initial(msgs)
    c0 = tok(a1, add_special_tokens=False).input_ids + [tok.eos_token_id]
    p1 = chat.next_prompt(p0, c0, feedback)
    full = msgs + [{"role": "assistant", "content": a1}, {"role": "user", "content": feedback}]
    c1 = tok(a2, add_special_tokens=False).input_ids + [tok.eos_token_id]
    rows = rows_from_trace(TrainingTrace(schema_version=1, turns=[_turn(0, p0, c0), _turn(1, p1, c1)]))

    assert len(rows) == 1  # one conversation, one row
    ids, labels = rows[0]["input_ids"], rows[0]["labels"]
    assert ids == p1 + c1
    trained = [t for t in labels if t != IGNORE]
    assert trained == c0 + c1
    assert tok.decode(trained) == f"{a1}<|im_end|>{a2}<|im_end|>"
    # Nothing the environment wrote is trained: system prompt, question, REPL output, template tokens.
    masked = tok.decode([t for t, lab in zip(ids, labels) if lab == IGNORE])
    assert prompts.SYSTEM_PROMPT in masked and "REPL output" in masked
    assert "FINAL('42')" not in masked and "print(len(context))\n" not in masked
    full_text = tok.apply_chat_template(full + [{"role": "assistant", "content": a2}], tokenize=False)
    assert tok.decode(ids) == full_text.rstrip("\n")


def test_teacher_answers_with_the_reference_program_or_a_fixable_first_attempt() -> None:
    task = generate("needle", 500_001, 4096)
    msgs = _conversation(task.question)
    ref = f"```repl\n{reference_solution(task.question).rstrip()}\n```"
    assert scripted_reply("teach", msgs, fix_fraction=0.0) == ref
    first = scripted_reply("teach", msgs, fix_fraction=1.0)
    assert first != ref and first == wrong_attempt(task.question, reference_solution(task.question))
    assert "FINAL" not in first or "contxt" in first  # a wrong attempt never answers
    later = msgs + [{"role": "assistant", "content": first}, {"role": "user", "content": "REPL output:\n..."}]
    assert scripted_reply("teach", later, fix_fraction=1.0) == ref  # the fix comes on the next turn
    kinds = {wrong_attempt(generate("needle", s, 4096).question, "x = context.find('a')") for s in range(20)}
    assert kinds == {"```repl\nx = contxt.find('a')\n```", "```repl\nprint(len(context))\nprint(context[:300])\n```"}


def test_teacher_speaks_token_ids_with_the_models_eos(tok, tiny_model_dir: Path) -> None:
    app = create_scripted_app("teach", "tiny", 4096, tokenizer_dir=str(tiny_model_dir), fix_fraction=0.0)
    task = generate("code_qa", 500_002, 4096)
    msgs = _conversation(task.question)
    with TestClient(app) as client:
        served = client.post("/tokenize", json={"messages": msgs, "add_generation_prompt": True}).json()
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert served["tokens"] == list(prompt) and served["max_model_len"] == 4096
        r = client.post("/v1/completions", json={"model": "tiny", "prompt": served["tokens"], "max_tokens": 2048})
        choice = r.json()["choices"][0]
        assert choice["prompt_token_ids"] == served["tokens"] and choice["finish_reason"] == "stop"
        assert choice["token_ids"][-1] == tok.eos_token_id
        assert tok.decode(choice["token_ids"][:-1]) == f"```repl\n{reference_solution(task.question).rstrip()}\n```"
        cut = client.post("/v1/completions", json={"prompt": served["tokens"], "max_tokens": 5}).json()["choices"][0]
        assert cut["finish_reason"] == "length" and len(cut["token_ids"]) == 5
        assert client.post("/v1/completions", json={"prompt": "text"}).status_code == 400


def test_teacher_programs_fit_the_demo_output_cap(tok) -> None:
    """A teacher turn longer than the cap would be cut in SFT data and unreachable in GRPO and evaluation."""
    from fathom.config import load_config

    cfg = load_config(Path(__file__).parents[2] / "configs" / "smoke.toml")
    cap = cfg.trainer.max_completion_tokens
    longest = {}
    for family in cfg.sft.families:
        for base in (0, 1_000_000, 2_000_000):  # train, test and held-out wordings
            for seed in range(40):
                reply = scripted_reply("teach", _conversation(generate(family, base + seed, 2048).question), 0.0)
                n = len(tok(reply, add_special_tokens=False).input_ids) + 1  # and the end-of-turn token
                longest[family] = max(longest.get(family, 0), n)
    assert all(n <= cap for n in longest.values()), (cap, longest)


def _bios_episode(tok, chat: ChatTokens):
    """The teacher's episode of a `bios` task as the proxy traces it: the root turn (the reference program), then
    the plain sub-call that program sends, answered by the teacher."""
    from tests.unit.tasks.restricted import run_restricted

    task = generate("bios", 500_004, 4096)
    msgs = _conversation(task.question)
    program = scripted_reply("teach", msgs, fix_fraction=0.0)
    sent: list[str] = []
    finals = run_restricted(reference_solution(task.question), task.context, task.question,
                            llm=lambda p: sent.append(p) or scripted_reply("teach", [{"role": "user", "content": p}]))
    assert len(sent) == 1 and finals == [task.gold.answer]
    p0 = chat.initial(msgs)
    c0 = tok(program, add_special_tokens=False).input_ids + [tok.eos_token_id]
    sub_msgs = [{"role": "user", "content": sent[0]}]
    reply = scripted_reply("teach", sub_msgs)
    ps = chat.initial(sub_msgs)  # the harness's token-path prompt of a plain sub-call
    cs = tok(reply, add_special_tokens=False).input_ids + [tok.eos_token_id]
    root = TrainingTurn(node_id="c0", prompt_token_ids=p0, completion_token_ids=c0, per_token_logps=[0.0] * len(c0),
                        loss_mask=[0] * len(p0) + [1] * len(c0),
                        metadata={"trainable": True, "role": "root", "conversation": "root"})
    sub = TrainingTurn(node_id="c1", prompt_token_ids=ps, completion_token_ids=cs, per_token_logps=[0.0] * len(cs),
                       loss_mask=[0] * len(ps) + [1] * len(cs), metadata={"trainable": True, "role": "subcall"})
    return task, TrainingTrace(schema_version=1, turns=[root, sub]), (p0, c0, ps, cs, sent[0], reply)


def test_teacher_subcall_rows_are_role_subcall_with_loss_on_the_reply_only(tok) -> None:
    task, trace, (p0, c0, ps, cs, prompt, reply) = _bios_episode(tok, ChatTokens(tok, "tiny"))
    assert reply == task.gold.answer  # the teacher answers its own sub-call right
    rows = rows_from_trace(trace)
    assert [r["role"] for r in rows] == ["root", "subcall"]
    sub = rows[1]
    assert sub["input_ids"] == ps + cs
    assert [t for t in sub["labels"] if t != IGNORE] == cs
    assert tok.decode([t for t in sub["labels"] if t != IGNORE]) == f"{task.gold.answer}<|im_end|>"
    # The rendered example, pinned: the template's default system prompt, the sub-call prompt, then the reply.
    masked = tok.decode([t for t, lab in zip(sub["input_ids"], sub["labels"]) if lab == IGNORE])
    assert masked == tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
    assert masked.endswith(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
    assert [t for t in rows[0]["labels"] if t != IGNORE] == c0 and rows[0]["input_ids"] == p0 + c0


def test_a_trace_with_subcalls_chains_to_one_row_per_conversation_under_trls_chaining(tok) -> None:
    """GRPO hands TRL the whole trace: the root conversation (two turns) and its sub-call must give two rows, the
    same rows SFT trains on, with nothing re-tokenized."""
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    chat = ChatTokens(tok, "tiny")
    task, trace, (p0, c0, ps, cs, prompt, reply) = _bios_episode(tok, chat)
    p1 = chat.next_prompt(p0, c0, prompts.repl_feedback(["Lisbon"], 2))
    c1 = tok("```repl\nFINAL('Lisbon')\n```", add_special_tokens=False).input_ids + [tok.eos_token_id]
    root1 = TrainingTurn(node_id="c2", prompt_token_ids=p1, completion_token_ids=c1, per_token_logps=[0.0] * len(c1),
                         loss_mask=[0] * len(p1) + [1] * len(c1),
                         metadata={"trainable": True, "role": "root", "conversation": "root"})
    # The proxy's training order (sessions.trace_records): the root conversation's turns, then plain sub-calls.
    ordered = TrainingTrace(schema_version=1, turns=[trace.turns[0], root1, trace.turns[1]])
    sequences, tally = _chain_to_sequences(_turns_from_training_trace(ordered), 0, 0)
    assert len(sequences) == 2 and tally["clean"] == 1 and tally["fork"] == 1
    assert sequences[0].input_ids == p1 + c1 and sequences[1].input_ids == ps + cs
    rows = rows_from_trace(ordered)
    assert [(r["role"], r["input_ids"]) for r in rows] == [("root", p1 + c1), ("subcall", ps + cs)]
    assert [r["labels"] for r in rows] == [[t if m else IGNORE for t, m in zip(s.input_ids, s.completion_mask)]
                                           for s in sequences]
