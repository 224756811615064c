"""OpenEnv wire types of the RLM environment: what a step-by-step client sends and sees.

Shared by the server and `fathom.env_server.client`; imports nothing from the server.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

ENV_NAME = "fathom_rlm"


class RLMAction(Action):
    """One REPL step: Python code run in the episode's sandbox (where `context` is preloaded)."""

    code: str = Field(..., min_length=1, description="Python source to run in the episode's REPL")
    parent_call_id: str | None = Field(
        None, description="Proxy call id of the model turn that wrote this code; llm() sub-calls name it as parent"
    )


class RLMObservation(Observation):
    """What reset and step return. Reset fills the task fields; step fills the REPL fields."""

    episode_id: str = ""
    task_id: str = ""
    question: str = ""
    context_chars: int = 0
    preview: str = Field("", description="The context's first characters (the context itself is never sent)")
    messages: list[dict[str, str]] = Field(
        default_factory=list, description="On reset: the scaffold's system and first user message, ready to send"
    )
    turn: int = Field(0, description="Steps taken so far")
    max_turns: int = 0
    output: str = Field("", description="REPL output shown to the model (stdout, stderr, error; truncated)")
    error: str | None = None
    truncated: bool = False
    killed_reason: str | None = None
    llm_calls: int = Field(0, description="llm() prompts this step sent")
    sandbox_ms: float = Field(0.0, description="Time the step spent inside the sandbox (llm() waits included)")
    final_answer: str | None = Field(None, description="Set when the step called FINAL / FINAL_VAR")
    stop_reason: str | None = None
    reward_components: dict[str, Any] | None = Field(None, description="protocol.RewardComponents, once done")


class RLMState(State):
    task_id: str | None = None
    done: bool = False
    stop_reason: str | None = None
    final_answer: str | None = None
    llm_calls: int = 0
    max_turns: int = 0
