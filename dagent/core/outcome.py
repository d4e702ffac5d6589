"""The outcome vocabulary: correct / wrong / ungraded with a cause, evaluation records and their
summary (pure).

An episode ends three ways: graded correct, graded wrong, or ungraded with a cause (the
sandbox ran out of memory, timed out, staging failed, the engine was unreachable...). Ungraded
episodes keep `reward=None` and are excluded from the score; the report states the exclusions
before the score (F24, F32), because a score over a silently shrunk set reads as plausible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["correct", "wrong", "ungraded"]


class GradeLike(Protocol):
    """What an outcome is read from: a grade's `correct` (True / False / None: ungraded)."""

    @property
    def correct(self) -> bool | None: ...


#: Why an episode is ungraded: the one vocabulary every module that sets a cause uses.
UngradedCause = Literal[
    "sandbox_unavailable",  # the backend could not create a sandbox
    "staging_failed",  # the task's tables could not be put into /workdir/input (F21)
    "sandbox_error",  # the sandbox failed while the agent worked in it
    "sandbox_oom",  # killed for memory without an answer (F18)
    "sandbox_timeout",  # the wall clock ran out without an answer (F18)
    "zero_model_calls",  # an LLM agent whose engine never answered (F07)
    "engine_unreachable",  # the agent's loop ended on an engine failure (F07)
    "env_unreachable",  # the environment server was lost in the middle of an episode (F32)
    "harness_crash",  # the agent harness died without an answer
    "harness_install_failed",  # the agent harness could not be installed in the sandbox (decided by exit code)
    "internal_error",  # a bug in dagent itself while the episode ran
]
UNGRADED_CAUSES: tuple[str, ...] = get_args(UngradedCause)
#: Causes under which an answer says nothing about the policy: it is ignored, the episode ungraded.
VOIDING_CAUSES = frozenset({"zero_model_calls", "engine_unreachable"})

#: Where an episode was cut off before it ended on its own (the published system's costliest
#: silent diagnosis: most rollouts ended mid-task on a cap nobody looked at).
Cutoff = Literal[
    "step_cap",  # the environment's tool-call budget was spent (later calls refused)
    "call_budget",  # the capture proxy's model-call budget answered a terminal stop
    "completion_budget",  # the loop's completion-token budget (TRL's max_completion_length)
    "context_overflow",  # the prompt outgrew the engine's context
    "tool_iterations",  # TRL's max_tool_calling_iterations
    "timeout",  # the agent process ran out of wall clock
]
CUTOFFS: tuple[str, ...] = get_args(Cutoff)


def cause_head(cause: str | None) -> str | None:
    """The vocabulary word of a cause that may carry detail (`staging_failed: <why>`)."""
    return None if cause is None else cause.split(":", 1)[0].strip()


class EvalRecord(BaseModel):
    """One evaluated episode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    split: str = Field(description="Split name the task was drawn from, e.g. 'test' or 'test:hard'.")
    index: int = Field(description="Index of the task within that split.")
    difficulty_tier: str
    agent: str
    model: str | None = Field(default=None, description="The served model id (None for the oracle).")
    sample: int = Field(default=0, description="Which of the n samples of this task (seeded by it).")
    outcome: Outcome
    reward: float | None = Field(description="None when ungraded; never coerced to 0.0 (F32).")
    correct: bool | None
    method: str = Field(description="Grader rule that decided, or 'ungraded'.")
    note: str = ""
    cause: UngradedCause | None = Field(default=None, description="Why the episode is ungraded.")
    answer: str | None = Field(default=None, description="The submitted answer, clipped.")
    exit_code: int | None = None
    model_calls: int | None = None
    tool_calls: int | None = None
    duration_s: float = 0.0
    cutoff: Cutoff | None = Field(
        default=None,
        description="Where the episode was cut off (CUTOFFS); None when it ended on its own or the agent does not say.",
    )
    transcript: list[dict[str, Any]] | None = Field(
        default=None,
        exclude=True,
        description="The episode's conversation as the agent held it (a model's episodes; None for the oracle). "
        "Left out of records.jsonl; `dagent.harness.play.write_records` writes it to "
        "transcripts.jsonl.gz beside it.",
    )


class TierSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: int
    graded: int
    correct: int
    accuracy: float | None


class EvalSummary(BaseModel):
    """Counts first, then the score over graded episodes only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: int
    graded: int
    correct: int
    wrong: int
    ungraded: int
    ungraded_causes: dict[str, int]
    excluded_fraction: float
    accuracy: float | None = Field(description="correct / graded; None when nothing was graded.")
    mean_reward: float | None
    by_tier: dict[str, TierSummary]

    def lines(self) -> list[str]:
        """The report, exclusions before the score."""
        out = [
            f"tasks {self.tasks}  graded {self.graded}  ungraded {self.ungraded} "
            f"({self.excluded_fraction:.1%} excluded)",
        ]
        out += [f"  ungraded: {cause} x{n}" for cause, n in sorted(self.ungraded_causes.items())]
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.2%}"
        out.append(f"correct {self.correct}  wrong {self.wrong}  accuracy {acc} (over graded)")
        for tier, t in self.by_tier.items():
            tacc = "n/a" if t.accuracy is None else f"{t.accuracy:.2%}"
            out.append(f"  {tier:<6} tasks {t.tasks:>5}  graded {t.graded:>5}  correct {t.correct:>5}  {tacc}")
        return out


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize(records: Sequence[EvalRecord] | Iterable[EvalRecord]) -> EvalSummary:
    records = list(records)
    graded = [r for r in records if r.outcome != "ungraded"]
    correct = sum(r.outcome == "correct" for r in records)
    rewards = [r.reward for r in graded if r.reward is not None]
    tiers: dict[str, TierSummary] = {}
    for tier in ("easy", "medium", "hard"):
        rs = [r for r in records if r.difficulty_tier == tier]
        if not rs:
            continue
        g = sum(r.outcome != "ungraded" for r in rs)
        c = sum(r.outcome == "correct" for r in rs)
        tiers[tier] = TierSummary(tasks=len(rs), graded=g, correct=c, accuracy=_ratio(c, g))
    ungraded = len(records) - len(graded)
    return EvalSummary(
        tasks=len(records),
        graded=len(graded),
        correct=correct,
        wrong=len(graded) - correct,
        ungraded=ungraded,
        ungraded_causes=dict(Counter(r.cause or "unknown" for r in records if r.outcome == "ungraded")),
        excluded_fraction=_ratio(ungraded, len(records)) or 0.0,
        accuracy=_ratio(correct, len(graded)),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        by_tier=tiers,
    )


def outcome_of(grade: GradeLike) -> Outcome:
    if grade.correct is None:
        return "ungraded"
    return "correct" if grade.correct else "wrong"
