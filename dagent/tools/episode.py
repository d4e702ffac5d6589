"""One white-box episode: a FULL task (server side), one sandbox, a step budget, a grade, a reward.

The trainer owns the loop; every tool call is one `Episode.call`. Invariants
(tests/tools/test_episode.py):

- `submit_solution` is exempt from the step budget (F26): once the budget is spent every other
  tool is refused with a message telling the agent to submit, and submitting still works.
- The tool-call count is the episode's own (F34): every non-terminator call the agent made within
  the budget, valid or not; refused calls are counted apart and do not cost reward.
- A submission is graded with the full task through `dagent.grading.settle.settle` (F14) and turned
  into a reward by `dagent.core.reward`; the grade is fixed at submission and the sandbox released.
- Ungraded stays `None` (F32): a sandbox that could not start or stage, or that was failing when
  the episode ended without a submission, gives `reward=None` with the cause, never 0.0.
- The instruction's "write /workdir/answer.txt" sentence (with or without a backticked example)
  is reworded at load time to point at `submit_solution`; other instructions are untouched (F28).
- Sessions live at MODULE scope, in a registry behind a lock: openenv's HTTP routes build and
  discard an environment instance per request, so nothing per-episode may live on an instance.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.reward import RewardConfig, reward
from dagent.core.task import Task
from dagent.errors import DagentError, SandboxError
from dagent.grading.settle import settle
from dagent.grading.value import Grade
from dagent.sandbox.base import Resources, Sandbox, SandboxBackend
from dagent.tools import TERMINATOR, ToolResult, ToolSettings, execute, select, validate

_LOG = logging.getLogger(__name__)

SUBMIT_SENTENCE = "Submit only that value by calling the `submit_solution` tool; there is no answer file to write."
SUBMITTED = "Answer submitted. The episode is over; no more tool calls are needed."  # the terminator's result
_ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf", "approx")


class EpisodeError(DagentError):
    """An episode id is unknown or already in use."""


class EpisodeNotFoundError(EpisodeError):
    """No running or recently finished episode has that id."""


class CapacityError(EpisodeError):
    """The server already runs as many episodes as it was configured for."""


#: The environment's step budget: tool calls one episode serves (the agent's cap may not exceed it, F35).
MAX_STEPS = 30


@dataclass(frozen=True)
class EpisodeConfig:
    tools: tuple[str, ...] = field(default_factory=select)  # served tool names (terminator included)
    max_steps: int = MAX_STEPS  # non-terminator tool calls allowed; submit_solution is exempt (F26)
    output_chars: int = 1200
    command_timeout_s: float = 60.0
    reward: RewardConfig = RewardConfig()
    idle_timeout_s: float = 1800.0  # an episode untouched this long is closed and its sandbox freed

    @property
    def settings(self) -> ToolSettings:
        return ToolSettings(output_chars=self.output_chars, command_timeout_s=self.command_timeout_s)


# ------------------------------------------------------------------ rewording (F28)


def _is_abbreviation(text: str, dot: int) -> bool:
    start = max(text.rfind(" ", 0, dot), text.rfind("(", 0, dot), text.rfind("\n", 0, dot)) + 1
    return text[start:dot].lower() in _ABBREVIATIONS


def _sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans; terminators inside backticks or brackets, and abbreviations, do not count."""
    spans, start, depth, tick, i, n = [], 0, 0, False, 0, len(text)
    while i < n:
        c = text[i]
        if c == "`":
            tick = not tick
        elif not tick and c in "([":
            depth += 1
        elif not tick and c in ")]" and depth:
            depth -= 1
        elif (
            not tick
            and depth == 0
            and (c == "\n" or c in ".!?" and (i + 1 == n or text[i + 1].isspace()) and not _is_abbreviation(text, i))
        ):
            end = i + 1
            while end < n and text[end] in " \t":
                end += 1
            spans.append((start, end))
            start = i = end
            continue
        i += 1
    if start < n:
        spans.append((start, n))
    return spans


def reword_submission(instruction: str) -> str:
    """Point the submission sentence at `submit_solution`; leave other instructions untouched."""
    if "answer.txt" not in instruction:
        return instruction
    out, placed = [], False
    for a, b in _sentences(instruction):
        seg = instruction[a:b]
        if "answer.txt" not in seg:
            out.append(seg)
            continue
        trail = seg[len(seg.rstrip()) :]
        if not placed:
            out.append(seg[: len(seg) - len(seg.lstrip())] + SUBMIT_SENTENCE + trail)
            placed = True
        elif "\n" in trail:
            out.append("\n")
    text = "".join(out)
    return text if instruction[-1:].isspace() else text.rstrip()


# ------------------------------------------------------------------ one episode


class Episode:
    """One task in one sandbox. `call` never raises."""

    def __init__(
        self,
        episode_id: str,
        task: Task,
        *,
        split: str,
        index: int,
        config: EpisodeConfig,
        sandbox: Sandbox | None,
        start_cause: str | None = None,
    ) -> None:
        self.episode_id, self.task, self.split, self.index = episode_id, task, split, index
        self.config, self.sandbox, self.start_cause = config, sandbox, start_cause
        self.instruction = reword_submission(task.instruction)
        self.tool_calls = 0  # non-terminator calls within the budget (F34)
        self.refused_calls = 0  # calls refused because the budget was spent
        self.answer: str | None = None
        self.grade: Grade | None = None  # once decided
        self.reward: float | None = None
        self.last_cause: str | None = None  # infrastructure cause of the most recent tool call
        self.last_active = time.monotonic()
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self.grade is not None

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        with self._lock:
            self.last_active = time.monotonic()
            try:
                return self._call(name, arguments)
            except Exception as e:  # noqa: BLE001 - a tool call must never take the server down
                _LOG.exception("tool %s failed inside episode %s", name, self.episode_id)
                self.last_cause = f"internal_error: {type(e).__name__}: {e}"  # infrastructure, not the agent
                return ToolResult(False, f"internal error in {name}: {type(e).__name__}: {e}", self.last_cause)

    def _call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        if self.done:
            return ToolResult(False, "the episode is over: an answer was already submitted")
        if name != TERMINATOR:
            if self.tool_calls >= self.config.max_steps:
                self.refused_calls += 1
                return ToolResult(
                    False,
                    f"the step budget of {self.config.max_steps} tool calls is spent: "
                    "call submit_solution now with your best answer",
                )
            self.tool_calls += 1
        args = validate(name, arguments, self.config.tools)
        if isinstance(args, ToolResult):
            return args
        if name == TERMINATOR:
            return self._submit(args["answer"])
        if self.sandbox is None:
            return ToolResult(
                False,
                f"the sandbox is unavailable ({self.start_cause}); this episode cannot be graded",
                self.start_cause,
            )
        try:
            result = execute(self.sandbox, name, args, self.config.settings)
        except SandboxError as e:
            self.last_cause = f"sandbox_error: {e}"
            return ToolResult(False, f"the sandbox failed: {e}", self.last_cause)
        self.last_cause = result.cause
        return result

    def _submit(self, answer: str) -> ToolResult:
        self.answer = answer
        if self.start_cause is not None:
            self.grade = Grade(None, None, "ungraded", self.start_cause)
        else:
            self.grade = settle(self.task, answer.encode("utf-8"))
        self.reward = reward(self.grade.correct, self.tool_calls, self.config.reward)
        self.release()
        return ToolResult(True, SUBMITTED)

    def finish(self) -> None:
        """Decide the grade of an episode that ended without a submission (idempotent)."""
        with self._lock:
            if self.done:
                return

            cause = self.start_cause or self.last_cause
            grade = settle(self.task, None, infra_cause=cause)
            if grade.correct is False:
                grade = dataclasses.replace(grade, note="no answer was submitted")
            self.grade = grade
            self.reward = reward(grade.correct, self.tool_calls, self.config.reward)

    def release(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            try:
                sandbox.close()
            except Exception:  # noqa: BLE001 - releasing is best effort and must not mask the grade
                _LOG.exception("closing the sandbox of episode %s failed", self.episode_id)

    def summary(self) -> dict[str, Any]:
        g = self.grade
        return {
            "episode_id": self.episode_id,
            "split": self.split,
            "index": self.index,
            "task_id": self.task.task_id,
            "done": self.done,
            "submitted": self.answer is not None,
            "answer": None if self.answer is None else self.answer[:200],
            "tool_calls": self.tool_calls,
            "refused_calls": self.refused_calls,
            "reward": self.reward,
            "correct": None if g is None else g.correct,
            "method": None if g is None else g.method,
            "note": None if g is None else g.note,
            "cause": self.start_cause or (self.last_cause if g is not None and g.correct is None else None),
        }


# ------------------------------------------------------------------ the module-level registry

_EPISODES: dict[str, Episode | None] = {}  # None: the slot is reserved while the sandbox starts
_FINISHED: OrderedDict[str, dict[str, Any]] = OrderedDict()
_KEEP_FINISHED = 10_000
_LOCK = threading.Lock()


def _start_sandbox(
    task: Task, files: Mapping[str, Path], backend: SandboxBackend, config: EpisodeConfig
) -> tuple[Sandbox | None, str | None]:
    try:
        sandbox = backend.create(
            Resources(cpus=task.cpus, memory_mb=task.memory_mb, timeout_s=config.command_timeout_s)
        )
    except (SandboxError, OSError) as e:
        return None, f"sandbox_unavailable: {e}"
    try:
        sandbox.stage(files)
    except (SandboxError, OSError) as e:  # StagingError is a SandboxError
        sandbox.close()
        return None, f"staging_failed: {e}"
    return sandbox, None


def open_episode(
    task: Task,
    files: Mapping[str, Path],
    backend: SandboxBackend,
    *,
    split: str,
    index: int,
    config: EpisodeConfig,
    max_episodes: int | None = None,
    episode_id: str | None = None,
) -> Episode:
    """Start an episode in a fresh sandbox with the task's tables staged, and register it."""
    reap_idle(config.idle_timeout_s)
    eid = episode_id or uuid.uuid4().hex
    with _LOCK:
        if eid in _EPISODES:
            raise EpisodeError(f"episode id {eid!r} is already running; omit episode_id to get a fresh one")
        if max_episodes is not None and len(_EPISODES) >= max_episodes:
            raise CapacityError(
                f"server at capacity: {len(_EPISODES)}/{max_episodes} episodes are running; "
                "finish some (get_reward releases one) or raise DAGENT_MAX_EPISODES"
            )
        _EPISODES[eid] = None
    try:
        sandbox, cause = _start_sandbox(task, files, backend, config)
        if cause:
            _LOG.warning("episode %s (%s) starts ungraded: %s", eid, task.task_id, cause)
        episode = Episode(eid, task, split=split, index=index, config=config, sandbox=sandbox, start_cause=cause)
    except BaseException:
        with _LOCK:
            _EPISODES.pop(eid, None)
        raise
    with _LOCK:
        _EPISODES[eid] = episode
    return episode


def finished_episodes() -> dict[str, dict[str, Any]]:
    """A copy of the summaries of recently finished episodes, oldest first (id -> summary)."""
    with _LOCK:
        return dict(_FINISHED)


def get_episode(episode_id: str) -> Episode:
    with _LOCK:
        episode = _EPISODES.get(episode_id)
        finished = episode_id in _FINISHED
    if episode is None:
        if finished:
            raise EpisodeNotFoundError(
                f"episode {episode_id!r} is finished and its sandbox released; reset to start another"
            )
        raise EpisodeNotFoundError(f"unknown episode {episode_id!r}: call reset first (or it was idle and reaped)")
    return episode


def close_episode(episode_id: str) -> dict[str, Any]:
    """Finish an episode (grade it if it never submitted), free its sandbox, return its summary."""
    with _LOCK:
        episode = _EPISODES.get(episode_id)
        if episode is not None:
            del _EPISODES[episode_id]
        elif episode_id in _FINISHED:
            return _FINISHED[episode_id]
    if episode is None:
        raise EpisodeNotFoundError(f"unknown episode {episode_id!r}: call reset first (or it was idle and reaped)")
    episode.finish()
    with episode._lock:
        episode.release()
    summary = episode.summary()
    with _LOCK:
        _FINISHED[episode_id] = summary
        while len(_FINISHED) > _KEEP_FINISHED:
            _FINISHED.popitem(last=False)
    return summary


def episode_summary(episode_id: str) -> dict[str, Any]:
    with _LOCK:
        episode = _EPISODES.get(episode_id)
        if episode is None and episode_id in _FINISHED:
            return _FINISHED[episode_id]
    return get_episode(episode_id).summary()


def active_episodes() -> int:
    with _LOCK:
        return len(_EPISODES)


def close_all() -> int:
    """Finish every running episode and free its sandbox (a run that ends, however it ends)."""
    with _LOCK:
        ids = [eid for eid, ep in _EPISODES.items() if ep is not None]
    for eid in ids:
        close_episode(eid)
    return len(ids)


def reap_idle(timeout_s: float) -> list[str]:
    """Close episodes untouched for `timeout_s` (a trainer that died never calls get_reward)."""
    now = time.monotonic()
    with _LOCK:
        stale = [eid for eid, ep in _EPISODES.items() if ep is not None and now - ep.last_active > timeout_s]
    for eid in stale:
        _LOG.warning("closing episode %s: idle for more than %.0fs", eid, timeout_s)
        try:
            close_episode(eid)
        except EpisodeError:
            pass
    return stale
