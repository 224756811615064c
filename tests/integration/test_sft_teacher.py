"""`fathom sft`'s recordings: the scripted teacher and a capture proxy served in this process, episodes on a real
env server, rows tagged with their family."""

from __future__ import annotations

import pytest

from fathom.config import load_config
from fathom.policy_server.tiny import build_tiny
from fathom.stack.teacher import record_teacher
from fathom.tasks.record import parse_id
from tests.integration.env_server_stack import short_tasks

pytestmark = pytest.mark.integration


def test_record_teacher_runs_each_task_on_the_env_server_and_reports_every_one(scripted_stack):
    """On the session's env server (conftest's `scripted_stack`): the teacher and its proxy run in this process."""
    ids = short_tasks(2)
    cfg = load_config(scripted_stack.tmp / "stack.toml", ["--model.name", str(build_tiny())])
    seen: list[int] = []
    rows, summaries = record_teacher(cfg, ids, build_tiny(), workers=2, on_done=lambda s: seen.append(len(s)))
    assert [s["task_id"] for s in summaries] == ids and seen == [1, 2]
    assert all("error" not in s and s["turns"] >= 1 for s in summaries), summaries
    assert rows and sum(s["rows"] for s in summaries) == len(rows), summaries
    assert {r["family"] for r in rows} <= {parse_id(t)[0] for t in ids}
