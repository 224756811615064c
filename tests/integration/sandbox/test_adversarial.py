"""The adversarial suite: every payload ends blocked or killed, the host is unaffected,
and the next episode works. Runs on the real pool with every layer this machine offers."""

from __future__ import annotations

import os

import pytest

from tests.integration.sandbox.payloads import ESCAPE_FILE, PAYLOADS

GOLD = "GOLD-ANSWER-7f3a9c"


@pytest.fixture(scope="module", autouse=True)
def host_secrets(tmp_path_factory):
    """Secrets the host holds: an env var and a file. No payload may surface either."""
    gold_file = tmp_path_factory.mktemp("host") / "gold.txt"
    gold_file.write_text(GOLD)
    os.environ["FATHOM_TEST_GOLD"] = GOLD
    yield gold_file
    os.environ.pop("FATHOM_TEST_GOLD", None)


def test_suite_is_large_enough():
    assert len(PAYLOADS) >= 60
    assert len({name for name, _ in PAYLOADS}) == len(PAYLOADS)


@pytest.mark.parametrize("name, code", PAYLOADS, ids=[n for n, _ in PAYLOADS])
def test_payload_is_blocked_or_killed(pool, host_secrets, name, code):
    ep = pool.new_episode("document text", llm_handler=lambda ps: ["ok"] * len(ps))
    try:
        res = ep.run(code)
    finally:
        ep.close()
    seen = "\n".join(x for x in (res.stdout, res.stderr, res.error or "", res.final_answer or "") if x)
    assert "ESCAPED" not in res.stdout, f"{name} got through: {res.output(500)}"
    assert res.error is not None or res.killed_reason is not None, f"{name} ended neither blocked nor killed"
    assert GOLD not in seen and "root:x:0:0" not in seen
    assert not os.path.exists(ESCAPE_FILE)
    # The next episode works and the host's own state is untouched.
    nxt = pool.new_episode("next")
    try:
        assert nxt.run("print(context, 2 + 2)").stdout == "next 4\n"
    finally:
        nxt.close()
    assert os.environ["FATHOM_TEST_GOLD"] == GOLD and host_secrets.read_text() == GOLD


def test_kills_name_their_reason(pool):
    ep = pool.new_episode("")
    res = ep.run("while True:\n    try:\n        pass\n    except BaseException:\n        pass")
    assert res.killed_reason == "timeout"
    ep.close()


def test_memory_bomb_is_stopped_by_the_address_space_limit(pool):
    ep = pool.new_episode("")
    try:
        res = ep.run("x = 'a' * (1 << 30)")
        assert "MemoryError" in (res.error or "") or res.killed_reason == "memory"
    finally:
        ep.close()


def test_episode_cannot_read_another_episodes_variables(pool):
    a = pool.new_episode("doc A")
    b = pool.new_episode("doc B")
    try:
        assert a.run("secret = 'S3CRET-A'\nFINAL(secret)").final_answer == "S3CRET-A"
        for code in ("print(secret)", "FINAL_VAR('secret')", "print(SHOW_VARS())", "print(context)"):
            res = b.run(code)
            assert "S3CRET-A" not in res.output() and "S3CRET-A" != res.final_answer
        assert b.run("print(context)").stdout == "doc B\n"
        assert a.run("print(secret)").stdout == "S3CRET-A\n"
    finally:
        a.close()
        b.close()


def test_gold_answer_never_reaches_the_sandbox(pool, host_secrets):
    ep = pool.new_episode("question text")
    try:
        res = ep.run("print(SHOW_VARS())\nprint(context)")
        assert GOLD not in res.output()
        assert set(eval(res.stdout.splitlines()[0])) == {"context"}  # noqa: S307 - our own dict literal
    finally:
        ep.close()
