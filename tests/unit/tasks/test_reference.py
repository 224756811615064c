"""Reference solutions solve generated tasks from the question alone, under RestrictedPython's rules."""

from __future__ import annotations

import re

import pytest

from fathom.tasks import FAMILIES, generate, get_task, load_split, reference_solution, score
from tests.unit.tasks.restricted import run_restricted, teacher_llm


def _solve(task) -> str | None:
    finals = run_restricted(reference_solution(task.question), task.context, task.question)
    assert len(finals) == 1, f"{task.id}: FINAL called {len(finals)} times"
    return None if finals[0] is None else str(finals[0])


def test_solves_the_whole_test_split() -> None:
    ids = load_split("test")
    wrong = []
    for tid in ids:
        t = get_task(tid)
        rc = score(t, _solve(t), via_final=True, total_tokens=0, llm_calls=0)
        if not rc.correct:
            wrong.append(tid)
    assert not wrong, f"reference solutions missed {len(wrong)}/{len(ids)}: {wrong[:5]}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("split_base", [0, 1_000_000, 2_000_000])
def test_every_template_and_tier(family: str, split_base: int) -> None:
    for offset in range(9):  # every difficulty tier, several template draws, both distractor settings
        for d in (None, False):
            t = generate(family, split_base + offset, 4096 if offset % 2 else 24576, distractors=d)
            assert score(t, _solve(t), via_final=True, total_tokens=0, llm_calls=0).correct, t.id


def test_wrong_reference_for_another_task_is_scored_wrong() -> None:
    a, b = generate("needle", 4, 8192), generate("needle", 5, 8192)
    assert not score(b, _solve(a), via_final=True, total_tokens=0, llm_calls=0).correct


def test_sources_stay_inside_the_sandbox_rules() -> None:
    for family in FAMILIES:
        src = reference_solution(generate(family, 2, 8192).question)
        assert "__" not in src and "open(" not in src and "eval(" not in src
        imports = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
        assert imports == ["import re"]


def test_names_are_read_from_the_question_not_copied() -> None:
    """One wording, one program: what the question names comes from the REPL's `question`, not from the source."""
    for family in FAMILIES:
        by_template: dict[str, set[str]] = {}
        programs: dict[str, set[str]] = {}
        for seed in range(40):
            t = generate(family, seed, 4096)
            by_template.setdefault(t.metadata.template, set()).add(t.question)
            programs.setdefault(t.metadata.template, set()).add(reference_solution(t.question))
        shared = [k for k, qs in by_template.items() if len(qs) > 1]
        assert shared, f"{family}: no two questions of one wording in 40 seeds"
        assert all(len(programs[k]) == 1 for k in shared), family
    t, other = generate("needle", 4, 8192), generate("needle", 6, 8192)
    assert run_restricted(reference_solution(t.question), t.context, other.question) != [t.gold.answer]


def test_unknown_question_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="generated tasks only"):
        reference_solution("What is the meaning of life?")


def test_runs_with_the_sandbox_guards() -> None:
    """Cross-check against the env server's own restricted namespace (in-process, no worker processes)."""
    from fathom.env_server.sandbox import guards, toolbox
    from fathom.env_server.sandbox.policy import SandboxPolicy
    from RestrictedPython import compile_restricted_exec
    from RestrictedPython.PrintCollector import PrintCollector

    for family in FAMILIES:
        for seed in (1, 1_000_002, 2_000_000):
            t = generate(family, seed, 16384)
            code = compile_restricted_exec(reference_solution(t.question), filename="<reference>")
            assert not code.errors, code.errors
            finals: list[object] = []
            env = guards.restricted_globals(PrintCollector)
            env.update(context=t.context, question=t.question, FINAL=finals.append, llm=teacher_llm)
            helpers = guards.restricted_globals(PrintCollector)
            toolbox.install(env, helpers, compile_restricted_exec(toolbox.SOURCE, policy=SandboxPolicy).code, t.context,
                            guards.MODULE_PROXIES["re"])
            exec(code.code, env)  # noqa: S102 - RestrictedPython-compiled reference programs
            assert score(t, str(finals[0]), via_final=True, total_tokens=0, llm_calls=0).correct, t.id


_ASKS = {"needle": ["question"], "kv_chain": ["question"], "code_qa": ["calls", "config", "where"], "bios": ["question"]}


@pytest.mark.parametrize("family", sorted(_ASKS))
def test_every_train_question_phrasing_is_solved(family: str) -> None:
    """Each train question puts the key or name somewhere else; the reference (and so the SFT teacher) must find it
    and, for code_qa, tell the kind of question from every wording."""
    from fathom.tasks.families import MODULES

    n = sum(len(MODULES[family].TEMPLATES["train"][kind]) for kind in _ASKS[family])
    asked = re.compile("/(?:" + "|".join("q" if k == "question" else k for k in _ASKS[family]) + r")\d+$")
    solved: set[str] = set()
    for seed in range(400):
        t = generate(family, seed, 4096)
        qid = next(part for part in t.metadata.template.split("+") if asked.search(part))
        if qid not in solved:
            assert score(t, _solve(t), via_final=True, total_tokens=0, llm_calls=0).correct, (t.id, t.question)
            solved.add(qid)
        if len(solved) == n:
            break
    assert len(solved) == n, f"only {sorted(solved)} drawn in 400 seeds"


def test_each_kind_of_program_opens_with_its_own_task_line() -> None:
    """The first line names the kind of task, so the one choice that depends on the question's wording comes at the
    program's first token, and `program_family` reads the family back from it."""
    from fathom.tasks.reference import TASK_LINES, program_family

    firsts: dict[str, set[str]] = {}
    for family in FAMILIES:
        for base in (0, 1_000_000, 2_000_000):  # train, test and held-out wordings
            for seed in range(30):
                src = reference_solution(generate(family, base + seed, 4096).question)
                first, second = src.splitlines()[:2]
                assert first.startswith("# ") and second == "import re", src[:80]
                if family not in firsts.get(first, ()):  # program_family once per kind: it is the slow part
                    assert program_family(src) == family and program_family("\n  " + src + "\n") == family
                firsts.setdefault(first, set()).add(family)
    assert sorted(firsts) == sorted(f"# {line}" for line in TASK_LINES.values())  # every kind drawn, one line each
    assert program_family("import re\nFINAL(1)") is None and program_family("# Follow the links") is None
    assert program_family("") is None and program_family("print(len(context))\nprint(context[:300])") is None


def test_program_family_reads_the_body_not_the_task_line() -> None:
    """A model words its task line its own way, and may put one family's line on another's program."""
    from fathom.tasks.reference import TASK_LINES, program_family

    chain = reference_solution(generate("kv_chain", 3, 4096).question)
    needle = reference_solution(generate("needle", 3, 4096).question)
    body = chain.split("\n", 1)[1]
    assert program_family("# Follow the chain that starts at the key.\n" + body) == "kv_chain"
    assert program_family(body) == "kv_chain"  # no task line at all
    assert program_family(f"# {TASK_LINES['kv_chain']}\n" + needle.split("\n", 1)[1]) == "needle"
    # A program cut short by the output cap is still the kind it started as.
    assert program_family(chain[: int(len(chain) * 0.8)]) == "kv_chain"
