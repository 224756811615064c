"""The scripted upstream: vLLM-shaped replies, token-faithful prefixes across turns, each policy's move."""

from __future__ import annotations

from fastapi.testclient import TestClient

from fathom.env_server.scripted import IM_END, create_scripted_app, render_prompt, scripted_reply
from fathom.testing.fake_vllm import create_fake_vllm
from fathom.env_server.server import prompts
from fathom.tasks import get_task, load_split, reference_solution


def chat(client, messages, **extra):
    r = client.post("/v1/chat/completions", json={"model": "fathom-base", "messages": messages} | extra)
    assert r.status_code == 200, r.text
    return r.json()


def test_reference_reply_is_the_solution_and_ids_extend_the_previous_turn():
    task = get_task(load_split("test")[0])
    msgs = prompts.initial_messages(task.question, task.context, 300)
    with TestClient(create_scripted_app("reference")) as c:
        one = chat(c, msgs, logprobs=True, return_token_ids=True)
        text = one["choices"][0]["message"]["content"]
        assert text == f"```repl\n{reference_solution(task.question).rstrip()}\n```"
        ids = one["choices"][0]["token_ids"]
        assert ids[-1] == IM_END and len(ids) == len(one["choices"][0]["logprobs"]["content"])
        assert one["usage"]["prompt_tokens"] == len(one["prompt_token_ids"]) == len(render_prompt(msgs))
        msgs2 = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": "REPL output:\n..."}]
        two = chat(c, msgs2, return_token_ids=True)
        assert two["prompt_token_ids"][: len(one["prompt_token_ids"]) + len(ids)] == one["prompt_token_ids"] + ids
        plain = chat(c, [{"role": "user", "content": "hello"}])
        assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain
        assert plain["choices"][0]["message"]["content"].startswith("[scripted reply to a 5-character prompt")


def test_policies_and_switching():
    task = get_task(load_split("test")[0])
    msgs = prompts.initial_messages(task.question, task.context, 300)
    assert "FINAL(" in scripted_reply("no_tools", msgs) and "context" not in scripted_reply("no_tools", msgs)
    assert "llm_batch" in scripted_reply("recursive", msgs)
    assert prompts.code_blocks(scripted_reply("no_code", msgs)) == []
    later = msgs + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    assert scripted_reply("no_code", later) == scripted_reply("reference", msgs)
    nested = prompts.initial_messages(prompts.NESTED_QUESTION, "z" * 9000, 300)
    assert "FINAL(head)" in scripted_reply("reference", nested)
    with TestClient(create_fake_vllm("reference")) as c:
        assert c.post("/scripted/policy", json={"policy": "bogus"}).status_code == 422
        assert c.post("/scripted/policy", json={"policy": "no_tools"}).json() == {"policy": "no_tools"}
        assert "FINAL(" in chat(c, msgs)["choices"][0]["message"]["content"]
        assert c.get("/v1/models").json()["data"][0]["id"] == "fathom-base"
        assert c.post("/v1/chat/completions", json={"messages": []}).status_code == 400


def test_max_tokens_cuts_the_reply_with_finish_reason_length():
    task = get_task(load_split("test")[0])
    msgs = prompts.initial_messages(task.question, task.context, 300)
    with TestClient(create_scripted_app("reference")) as c:
        r = chat(c, msgs, max_tokens=5, return_token_ids=True)
        assert r["choices"][0]["finish_reason"] == "length" and len(r["choices"][0]["token_ids"]) == 4


def test_unknown_question_gets_a_plain_refusal_not_an_error():
    msgs = prompts.initial_messages("What is the airspeed of a swallow?", "x" * 100, 50)
    reply = scripted_reply("reference", msgs)
    assert reply.startswith("I cannot solve this question") and prompts.code_blocks(reply) == []


def test_token_side_reads_the_conversation_from_ids_and_samples_ids(tmp_path):
    from fathom.env_server.server.tokens import ChatTokens
    from tests.unit.env_server.fakes import byte_tokenizer

    byte_tokenizer().save_pretrained(tmp_path)
    chat = ChatTokens.load(tmp_path)
    task = get_task(load_split("test")[0])
    msgs = prompts.initial_messages(task.question, task.context, 300)
    with TestClient(create_scripted_app("reference", tokenizer_dir=str(tmp_path))) as c:
        probe = c.post("/tokenize", json={"model": "m", "messages": msgs}).json()
        assert probe["tokens"] == chat.initial(msgs)
        one = c.post("/v1/completions", json={"prompt": chat.initial(msgs), "logprobs": 0}).json()["choices"][0]
        assert one["text"] == f"```repl\n{reference_solution(task.question).rstrip()}\n```"
        assert one["token_ids"] == chat.encode(one["text"]) + [chat.eot_id] and one["finish_reason"] == "stop"
        assert len(one["logprobs"]["token_logprobs"]) == len(one["token_ids"])
        # A second turn built in token space reads back as system, user, assistant, user.
        nxt = chat.next_prompt(chat.initial(msgs), one["token_ids"], "REPL output:\n...")
        cut = c.post("/v1/completions", json={"prompt": nxt, "max_tokens": 3}).json()["choices"][0]
        assert cut["finish_reason"] == "length" and len(cut["token_ids"]) == 3
        assert c.post("/v1/completions", json={"prompt": "text"}).status_code == 400
    from fathom.env_server.scripted import TokenSide

    read = TokenSide(str(tmp_path)).messages(nxt)
    assert [m["role"] for m in read] == ["system", "user", "assistant", "user"]
    assert read[:2] == msgs and read[2]["content"] == one["text"] and read[3]["content"] == "REPL output:\n..."


def test_the_teacher_serves_no_test_routes_and_the_fake_vllm_injects_faults():
    msgs = prompts.initial_messages("What is the value of 'x'?", "x" * 100, 300)
    with TestClient(create_scripted_app("reference")) as c:
        assert c.post("/scripted/fault", json={"drop_logprobs": True}).status_code == 404
        assert c.post("/collective_rpc", json={"method": "reload_weights"}).status_code == 404
    with TestClient(create_fake_vllm("reference")) as c:
        body = {"model": "fathom-base", "messages": msgs, "logprobs": True}
        assert c.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"] is not None
        assert c.post("/scripted/fault", json={"drop_logprobs": True}).json()["drop_logprobs"] is True
        assert c.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"] is None
        assert c.post("/scripted/fault", json={"nope": 1}).status_code == 422
        c.post("/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": "/w"}})
        assert c.get("/scripted/weights").json() == {"weights_path": "/w", "reloads": 1}


def test_teacher_answers_the_subcalls_of_its_own_bios_program():
    """The bios reference program sends the person's passages and the question to llm(); the teacher (any policy)
    answers with the city the generator put there, the reply SFT's sub-call rows teach."""
    from fathom.tasks import generate

    for seed in (1, 2, 1_000_001, 2_000_002):
        task = generate("bios", seed, 8192)
        who = task.metadata.extra["person"]
        prompt = "\n".join(ln for ln in task.context.splitlines() if who in ln) + "\n\n" + task.question
        with TestClient(create_scripted_app("teach")) as c:
            reply = chat(c, [{"role": "user", "content": prompt}])["choices"][0]["message"]["content"]
        assert reply == task.gold.answer, (task.id, prompt)
    assert "```repl" in scripted_reply("teach", prompts.initial_messages(task.question, task.context, 300), 0.0)
