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
from fathom.env_server.teacher import create_teacher_app, split_messages, teacher_reply, wrong_attempt
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
    p0 = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    c0 = tok(a1, add_special_tokens=False).input_ids + [tok.eos_token_id]
    # The next prompt is the previous prompt + completion, then the template's tokens for the new user turn.
    full = msgs + [{"role": "assistant", "content": a1}, {"role": "user", "content": feedback}]
    text_full = tok.apply_chat_template(full, add_generation_prompt=True, tokenize=False)
    text_prev = tok.decode(p0 + c0, skip_special_tokens=False)
    assert text_full.startswith(text_prev)
    p1 = p0 + c0 + tok(text_full[len(text_prev):], add_special_tokens=False).input_ids
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


def test_split_messages_reads_back_a_rendered_prompt(tok) -> None:
    msgs = _conversation("Which value is it?") + [{"role": "assistant", "content": "```repl\nprint(1)\n```"},
                                                 {"role": "user", "content": "REPL output:\n1"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert split_messages(text, "<|im_start|>", tok.eos_token) == msgs


def test_teacher_answers_with_the_reference_program_or_a_fixable_first_attempt() -> None:
    task = generate("needle", 500_001, 4096)
    msgs = _conversation(task.question)
    ref = f"```repl\n{reference_solution(task.question).rstrip()}\n```"
    assert teacher_reply(msgs, fix_fraction=0.0) == ref
    first = teacher_reply(msgs, fix_fraction=1.0)
    assert first != ref and first == wrong_attempt(msgs[1]["content"], ref[len("```repl\n"):-len("\n```")])
    assert "FINAL" not in first or "contxt" in first  # a wrong attempt never answers
    later = msgs + [{"role": "assistant", "content": first}, {"role": "user", "content": "REPL output:\n..."}]
    assert teacher_reply(later, fix_fraction=1.0) == ref  # the fix comes on the next turn


def test_teacher_speaks_token_ids_with_the_models_eos(tok, tiny_model_dir: Path) -> None:
    app = create_teacher_app(tok, "tiny", max_model_len=4096, fix_fraction=0.0)
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
        assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
        cut = client.post("/v1/completions", json={"prompt": served["tokens"], "max_tokens": 5}).json()["choices"][0]
        assert cut["finish_reason"] == "length" and len(cut["token_ids"]) == 5
        assert client.post("/v1/completions", json={"prompt": "text"}).status_code == 400
