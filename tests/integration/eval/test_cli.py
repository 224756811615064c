"""`fathom eval` refuses bad input before starting anything (in-process: nothing starts, so no subprocess)."""

from __future__ import annotations

from typer.testing import CliRunner

from fathom.entrypoints.cli import app


def test_bad_task_ids_are_named(tmp_path):
    for bad, msg in (("needle-1k", "expected FAMILY-LENGTH-sSEED"), ("poetry-1k-s1000000", "names family 'poetry'")):
        r = CliRunner().invoke(app, ["eval", "--tasks", bad, "--out", str(tmp_path)])
        assert r.exit_code == 2 and msg in r.stderr, r.output
