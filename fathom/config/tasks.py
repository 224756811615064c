"""Settings of the task suite and its reward (owned by the tasks component)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fathom.config.base import FathomModel


class RewardConfig(FathomModel):
    """Weights and limits of the reward; `total` = sum of weight x component, capped for wrong answers."""

    correctness: float = Field(0.7, ge=0.0)
    """Weight of correctness (1 for a match, set F1 for pair answers)."""

    format: float = Field(0.1, ge=0.0)
    """Weight of answering through FINAL exactly once."""

    token_budget: float = Field(0.2, ge=0.0)
    """Weight of the token-budget penalty (component in [-1, 0]: fraction of the budget overspent, capped at 1)."""

    recursion: float = Field(0.1, ge=0.0)
    """Weight of recursion efficiency (1 - llm_calls / recursion_max_calls), counted only when correct."""

    tool_bonus: float = Field(0.1, ge=0.0, le=0.1)
    """Weight of the tool-efficiency bonus (unused share of the token budget), only when correct; at most 0.1."""

    wrong_ceiling: float = Field(0.1, ge=0.0)
    """No wrong answer may score above this total."""

    token_budget_scale: float = Field(1.0, gt=0.0)
    """Multiplies each task's own `metadata.token_budget` (root + sub-call tokens)."""

    recursion_max_calls: int = Field(16, gt=0)
    """llm() calls at which the recursion component reaches 0."""

    max_llm_calls: int = Field(64, gt=0)
    """More llm() calls than this is recursion spam: the answer is not counted correct."""

    max_final_calls: int = Field(1, gt=0)
    """More FINAL calls than this is FINAL spam: the answer is not counted correct and format is 0."""

    numeric_rel_tol: float = Field(0.0, ge=0.0)
    """Relative tolerance for numeric answers (0: planted 7-digit values must match exactly)."""

    numeric_abs_tol: float = Field(1e-9, ge=0.0)
    """Absolute tolerance for numeric answers (accepts `42.0` for 42)."""

    set_f1_correct: float = Field(1.0, gt=0.0, le=1.0)
    """Set answers count as correct at or above this F1."""

    answer_min_cap: int = Field(64, gt=0)
    """Answers longer than max(answer_min_cap, answer_len_factor x gold length) characters are not correct."""

    answer_len_factor: float = Field(4.0, ge=1.0)
    """See answer_min_cap: how much longer than the gold an answer may be."""

    @model_validator(mode="after")
    def _correct_beats_wrong(self) -> "RewardConfig":
        worst_correct = self.correctness * self.set_f1_correct - self.token_budget
        if worst_correct <= self.wrong_ceiling:
            raise ValueError(
                f"a correct answer can score {worst_correct:.3f} (correctness x set_f1_correct - token_budget), "
                f"not above wrong_ceiling ({self.wrong_ceiling}); raise tasks.reward.correctness or lower "
                "tasks.reward.token_budget / tasks.reward.wrong_ceiling"
            )
        return self


SOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class TaskSource(FathomModel):
    """One external task set: a local JSONL, Parquet or CSV file, or a Hub dataset (see docs/tasks.md).

    `fathom tasks import NAME` pins it into the task store; the workflows then use it by name.
    """

    name: str = Field(pattern=SOURCE_NAME)
    """The imported split's name; task ids become `{name}-{row}` (e.g. `mydocs-3`)."""

    kind: Literal["jsonl", "parquet", "csv", "hub"]
    """jsonl is streamed line by line; parquet, csv and hub are read (streaming) through `datasets`."""

    path: str = ""
    """The file (jsonl, parquet, csv), or for hub a local directory laid out like a Hub dataset repo."""

    repo: str = ""
    """Hub dataset repo id (`owner/name`), for kind hub when `path` is empty."""

    config: str | None = None
    """Hub dataset config (subset) name."""

    split: str = "test"
    """Hub dataset split."""

    revision: str | None = None
    """Hub commit, tag or branch; the commit it resolves to is recorded in the manifest."""

    preset: str = ""
    """Field names of a known public set (`longbench`, `babilong`; `fathom tasks presets` lists them)."""

    fields: dict[str, str] = {}
    """Our field -> the source's column: id, question, context, answer, aliases, type, family (over the preset)."""

    answer_type: Literal["", "string", "number", "set"] = ""
    """Answer type of rows whose own type column is empty; "" infers number for numeric answers, else string."""

    list_answers: Literal["", "set", "aliases"] = ""
    """A list in the answer column is a set to match by F1 (`set`) or accepted spellings (`aliases`);
    "" takes the preset's choice, else set."""

    limit: int | None = Field(None, gt=0)
    """Import only the first N rows."""

    roles: list[Literal["train", "eval"]] = ["train", "eval"]
    """What the split is used for: GRPO training tasks, held-out evaluation (and the demo page's examples), or both."""

    weight: float = Field(1.0, gt=0.0)
    """Share of the GRPO training tasks drawn from this source, against tasks.generated_weight and other sources."""

    token_budget: int = Field(4000, gt=0)
    """Token budget (root + sub-calls) of rows without their own `token_budget` column."""

    @model_validator(mode="after")
    def _where(self) -> "TaskSource":
        if self.kind == "hub" and not (self.repo or self.path):
            raise ValueError(f"task source {self.name!r}: kind hub needs repo = 'owner/name' (or path = a local copy)")
        if self.kind != "hub" and not self.path:
            raise ValueError(f"task source {self.name!r}: kind {self.kind} needs path = the file to read")
        return self


class TasksConfig(FathomModel):
    reward: RewardConfig = RewardConfig()
    """Reward component weights and anti-hacking limits."""

    haystack: Literal["auto", "stdlib", "synthetic"] = "auto"
    """Filler text: the stdlib's sources (`stdlib`), a seeded word salad (`synthetic`), or stdlib if present (`auto`)."""

    manifest_dir: str = ""
    """Directory of the split manifests ({train,test,heldout}.json); empty means the ones shipped in fathom/tasks/splits."""

    verify_on_load: bool = False
    """Regenerate every task of a split when loading it and check its SHA-256 against the manifest."""

    store_dir: str = ""
    """The imported task store (manifests + content-addressed contexts); empty means $FATHOM_HOME/tasks.
    Every process that serves, trains or evaluates imported tasks must see the same store."""

    sources: list[TaskSource] = []
    """External task sets ([[tasks.sources]] tables); import each with `fathom tasks import NAME`."""

    generated_weight: float = Field(1.0, ge=0.0)
    """Share of GRPO training tasks from the built-in generators, against the train-role sources' weights
    (0: train on imported sources only)."""

    @model_validator(mode="after")
    def _unique_sources(self) -> "TasksConfig":
        names = [s.name for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks.sources: name(s) {dup} appear more than once; give each source its own name")
        if self.generated_weight == 0 and not any("train" in s.roles for s in self.sources):
            raise ValueError("tasks.generated_weight is 0 but no tasks.sources entry has the train role: "
                             "GRPO would have no tasks; raise generated_weight or add a train source")
        return self

    def source(self, name: str) -> TaskSource | None:
        return next((s for s in self.sources if s.name == name), None)
