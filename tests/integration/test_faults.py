"""Issue 14's fault table on real processes: each fault leads to its required outcome.

The scenarios live in `tests/integration/faults.py`, so `bench/load.py` runs the very same ones. Servers run under the
launch supervisor with the scripted upstream as the policy server (token path, tiny model's tokenizer), one
stack for the module: every scenario leaves it healthy. The trainer-kill row is
`test_trainer.py::test_resume_after_kill_continues_step_count_adapter_and_optimizer` (slow: it needs a real
vLLM and two trainer processes).
"""

from __future__ import annotations

import pytest

from tests.integration import faults

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with faults.scripted_stack(tmp_path_factory.mktemp("faults")) as st:
        yield st


@pytest.mark.parametrize("name", [n for n in faults.SCENARIOS if n != "trainer_killed_between_checkpoints"])
def test_fault_leads_to_its_outcome(name, tmp_path, stack):
    fn = faults.SCENARIOS[name]
    result = fn(tmp_path, stack) if fn in faults.STACK_SCENARIOS else fn(tmp_path)
    assert result["passed"], result
