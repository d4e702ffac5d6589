"""Evaluation through a running white-box server (`dagent eval --env-url URL`, e.g. a duplicated
Space): the tools loop of `ToolLoopAgent` with every tool call, the submission included, sent to
the server through the client training uses against a server (`dagent.envs.whitebox_client.WhiteBoxHTTP`),
and the task and its tier read from the server's Task API.

The server holds the sandbox, validates and clips calls, counts steps and grades; the record is
built from its episode summary (the reward training would get). What the loop itself decides is
the same as in process: the conversation starts from the instruction `reset` returns, sampling and
loop limits are the agent's. Outcomes stay three-way: a transport failure in the middle of an
episode voids it (`env_unreachable`, never a zero, F32); an engine failure voids it as in process
(`engine_unreachable`, `zero_model_calls`, F07); an episode the server could not grade keeps the
server's cause.
"""

from __future__ import annotations

import time
from typing import Any

from dagent.core.outcome import UNGRADED_CAUSES, EvalRecord, cause_head
from dagent.envs.whitebox_client import EnvServerError, WhiteBoxHTTP
from dagent.errors import ConfigError
from dagent.harness.base import sample_seed
from dagent.harness.toolloop import LoopAborted, ToolLoopAgent
from dagent.tools import ToolResult


def check_surface(http: WhiteBoxHTTP, tools: tuple[str, ...], config: Any = None) -> None:
    """The server must serve exactly the tools the loop offers the model (F25) and, when `config`
    (the preset's EpisodeConfig) is given, clip and budget episodes as it does: otherwise the
    checkpoint is measured under other conditions than it trained under."""
    served = {t["name"] for t in http.list_tools()}
    if served != set(tools):
        raise ConfigError(
            f"the server at {http.base_url} serves {sorted(served)} but the loop offers "
            f"{sorted(tools)}: start the server with DAGENT_TOOLS matching (F25)"
        )
    if config is None:
        return
    episode = http.capacity().get("episode")
    want = {"max_steps": config.max_steps, "output_chars": config.output_chars}
    if episode is None:
        raise ConfigError(
            f"the server at {http.base_url} does not say how it clips and budgets episodes "
            "(an older dagent): upgrade it, or evaluate in process without --env-url"
        )
    if {k: episode.get(k) for k in want} != want:
        raise ConfigError(
            f"the server at {http.base_url} runs episodes with {episode} but the preset trains "
            f"with {want}: start the server with the preset's settings or pick the matching --preset"
        )


def _record(
    public: dict[str, Any], split: str, index: int, agent: ToolLoopAgent, sample: int, started: float, **fields: Any
) -> EvalRecord:
    base: dict[str, Any] = dict(
        task_id=public["task_id"],
        split=split,
        index=index,
        difficulty_tier=public["difficulty_tier"],
        agent=agent.name,
        model=agent.model,
        sample=sample,
        duration_s=round(time.monotonic() - started, 4),
    )
    return EvalRecord(**{**base, **fields})


def _ungraded(cause: str, note: str, **fields: Any) -> dict[str, Any]:
    return dict(
        outcome="ungraded",
        reward=None,
        correct=None,
        method="ungraded",
        cause=cause,
        note=f"{cause}: {note}" if not note.startswith(cause) else note,
        **fields,
    )


def play_remote(http: WhiteBoxHTTP, split: str, index: int, agent: ToolLoopAgent, *, sample: int = 0) -> EvalRecord:
    """One task of the server's `split`, end to end through the server. Never raises for the
    server's or the engine's failures: they are ungraded records with their cause."""
    started = time.monotonic()
    try:
        public = http.task(split, index)
    except EnvServerError as e:  # the task itself is unknown: a placeholder identity, ungraded
        public = {"task_id": f"{split}[{index}]", "difficulty_tier": split.partition(":")[2] or "easy"}
        return _record(public, split, index, agent, sample, started, **_ungraded("env_unreachable", str(e)))
    try:
        obs = http.reset(split, index, task_id=public["task_id"])
    except EnvServerError as e:
        return _record(public, split, index, agent, sample, started, **_ungraded("env_unreachable", str(e)))
    episode_id = obs["episode_id"]
    lost: list[str] = []

    def call(name: str, args: dict[str, Any]) -> ToolResult:
        try:
            return http.call_tool(episode_id, name, args)
        except EnvServerError as e:
            lost.append(str(e))
            raise LoopAborted(str(e)) from e

    t, answer, engine_note = agent.loop(
        [{"role": "user", "content": obs["instruction"]}], sample_seed(public["task_id"], sample), call
    )
    try:
        summary = http.finish(episode_id)
    except EnvServerError as e:
        summary = None
        lost.append(str(e))
    counts = dict(model_calls=t.model_calls, tool_calls=None if summary is None else summary.get("tool_calls"))
    if t.model_calls == 0:
        fields = _ungraded("zero_model_calls", engine_note or "the engine never answered", **counts)
    elif engine_note:
        fields = _ungraded("engine_unreachable", engine_note, **counts)
    elif lost or summary is None:
        fields = _ungraded("env_unreachable", lost[0], **counts)
    elif summary.get("correct") is None:
        cause = cause_head(summary.get("cause") or summary.get("note"))
        fields = _ungraded(
            cause if cause in UNGRADED_CAUSES else "internal_error",
            str(summary.get("note") or summary.get("cause") or "ungraded by the server"),
            **counts,
        )
    else:
        fields = dict(
            outcome="correct" if summary["correct"] else "wrong",
            reward=summary["reward"],
            correct=summary["correct"],
            method=summary["method"],
            note=summary.get("note") or "",
            answer=summary.get("answer"),
            **counts,
        )
    return _record(public, split, index, agent, sample, started, transcript=[dict(m) for m in t.messages], **fields)
