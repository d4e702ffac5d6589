"""The episode skeleton every agent runs through, and evaluation over a split.

`play` is the ONE place where an episode's steps and failure rules live: create a sandbox sized
by the task, stage its tables, run the agent, read /workdir/answer.txt, settle the grade with the
FULL task (F14), turn it into the reward. The oracle evaluation, `dagent eval --agent ...` and the
black-box environment's rollouts all call it, so these rules exist once:

- infrastructure failures are data, never exceptions: `sandbox_unavailable`, `staging_failed`,
  `sandbox_error` come back as UNGRADED records (reward None, F32);
- an agent process killed for memory or time without an answer is ungraded (F18); an LLM agent
  whose engine never answered is ungraded even if a file was left behind (F07);
- the reward is `dagent.core.reward.reward(correct, tool_calls)` with the tool calls the AGENT counted
  from its own trace (F34).
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent.core.outcome import EvalRecord, EvalSummary, cause_head, outcome_of, summarize
from dagent.core.reward import RewardConfig, reward
from dagent.core.suite import TaskSuite
from dagent.core.task import ANSWER_PATH, INPUT_DIR, Task
from dagent.errors import SandboxError, StagingError
from dagent.grading.settle import settle
from dagent.grading.value import Grade
from dagent.harness.base import Agent, AgentRun, sample_seed
from dagent.provenance import provenance
from dagent.sandbox.base import Resources, SandboxBackend

ANSWER_CLIP = 500


@dataclass(frozen=True)
class Played:
    """One episode: its record, and what the agent's run left (None if the agent never ran)."""

    record: EvalRecord
    run: AgentRun | None
    task: Task


def clip_answer(answer: bytes | None) -> str | None:
    return None if answer is None else answer[: ANSWER_CLIP * 4].decode("utf-8", "replace")[:ANSWER_CLIP]


INPUT_PROBE = f"find {INPUT_DIR} -type f -size +0c -print -quit"


def probe_input(sandbox) -> None:
    """From inside the sandbox, before the agent and so before any model call: a staged input
    directory with no non-empty file stops the episode UNGRADED (`staging_failed`), never a 0.0
    the agent did not earn (F21)."""
    r = sandbox.exec(INPUT_PROBE, timeout_s=60)
    if r.exit_code != 0 or not r.stdout.strip():
        raise StagingError(
            f"directory empty: no non-empty file under {INPUT_DIR} inside the sandbox "
            f"(probe exit {r.exit_code}{', timed out' if r.timed_out else ''}), checked before "
            "the agent started"
        )


def play(
    suite: TaskSuite,
    split: str,
    index: int,
    agent: Agent,
    backend: SandboxBackend,
    *,
    timeout_s: float = 300.0,
    memory_mb: int | None = None,
    sample: int = 0,
    reward_config: RewardConfig = RewardConfig(),
) -> Played:
    """One task, end to end, through `agent` (module docstring). Never raises for infrastructure.
    `sample`: the sample number the agent's random draws are seeded from (`sample_seed`: the same
    draws for the same task and sample in every arm; two rollouts of one GRPO group must differ, F61)."""
    started = time.monotonic()
    task = suite.task_at(split, index)
    resources = Resources(
        cpus=task.cpus,
        memory_mb=memory_mb or task.memory_mb,
        timeout_s=timeout_s,
        runtime_address_space_mb=getattr(agent, "runtime_address_space_mb", 0),
    )
    run: AgentRun | None = None
    answer: bytes | None = None
    failure: tuple[str, str] | None = None  # (cause, note) of an infrastructure failure
    try:
        sandbox = backend.create(resources)
    except SandboxError as e:
        failure = ("sandbox_unavailable", str(e))
    else:
        with sandbox:
            try:
                sandbox.stage(suite.files_for(task))
                probe_input(sandbox)
                run = agent.run(task, sandbox, timeout_s=timeout_s, seed=sample_seed(task.task_id, sample))
                answer = sandbox.read_file(ANSWER_PATH)
            except StagingError as e:
                failure = ("staging_failed", str(e))
            except SandboxError as e:
                failure = ("sandbox_error", str(e))
    if failure is not None:
        grade = Grade(reward=None, correct=None, method="ungraded", note=failure[1])
        cause = failure[0]
    else:
        grade = settle(task, answer, infra_cause=run.infra_cause, model_calls=run.model_calls)
        cause = cause_head(grade.note) if grade.correct is None else None
    tool_calls = None if run is None else run.tool_calls
    record = EvalRecord(
        task_id=task.task_id,
        split=split,
        index=index,
        difficulty_tier=task.difficulty_tier,
        agent=agent.name,
        model=agent.model,
        sample=sample,
        outcome=outcome_of(grade),
        reward=reward(grade.correct, tool_calls or 0, reward_config),
        correct=grade.correct,
        method=grade.method,
        note=grade.note,
        cause=cause,
        answer=clip_answer(answer),
        exit_code=None if run is None or run.exec_result is None else run.exec_result.exit_code,
        model_calls=None if run is None else run.model_calls,
        tool_calls=tool_calls,
        duration_s=round(time.monotonic() - started, 4),
        cutoff=None if run is None else run.cutoff,
        transcript=transcript_of(run),
    )
    return Played(record=record, run=run, task=task)


def transcript_of(run: AgentRun | None) -> list[dict[str, Any]] | None:
    """The conversation an agent's run leaves: the tool loop's messages, or for a captured harness
    the messages of its last agent call and what that call sampled (ids: the text is the harness's)."""
    if run is None:
        return None
    if run.metadata.get("messages"):
        return [dict(m) for m in run.metadata["messages"]]
    if run.captured is not None and (chain := run.captured.trajectory.chain_turns()):
        last = chain[-1]
        return [
            *(dict(m) for m in last.messages),
            {"role": "assistant", "completion_token_ids": list(last.completion_token_ids)},
        ]
    return None


def run_episode(
    suite: TaskSuite,
    split: str,
    index: int,
    agent: Agent,
    backend: SandboxBackend,
    *,
    timeout_s: float = 300.0,
    sample: int = 0,
    reward_config: RewardConfig = RewardConfig(),
) -> EvalRecord:
    """One task's evaluation record (`play`'s)."""
    return play(
        suite, split, index, agent, backend, timeout_s=timeout_s, sample=sample, reward_config=reward_config
    ).record


def run_eval(
    suite: TaskSuite,
    split: str,
    agent: Agent,
    backend: SandboxBackend,
    *,
    workers: int = 2,
    limit: int | None = None,
    samples: int = 1,
    timeout_s: float = 300.0,
    out_dir: Path | None = None,
    reward_config: RewardConfig = RewardConfig(),
    on_done: Callable[[EvalRecord], None] | None = None,
) -> tuple[list[EvalRecord], EvalSummary]:
    """Evaluate `agent` on `split` (optionally its first `limit` tasks), `samples` times per task,
    with `workers` threads. Writes `records.jsonl` (in split order, then sample) and
    `summary.json` to `out_dir` when given."""
    n = len(suite.tasks(split))
    jobs = [(i, s) for i in range(n if limit is None else min(limit, n)) for s in range(max(1, samples))]
    records: dict[tuple[int, int], EvalRecord] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {
            pool.submit(
                run_episode, suite, split, i, agent, backend, timeout_s=timeout_s, sample=s, reward_config=reward_config
            ): (i, s)
            for i, s in jobs
        }
        for fut in as_completed(futures):
            rec = fut.result()
            records[futures[fut]] = rec
            if on_done is not None:
                on_done(rec)
    ordered = [records[job] for job in jobs]
    summary = summarize(ordered)
    if out_dir is not None:
        write_records(
            out_dir, ordered, summary, split=split, agent=agent.name, suite=suite.source, provenance=provenance(suite)
        )
    return ordered, summary


TRANSCRIPTS = "transcripts.jsonl.gz"


def write_records(out_dir: Path, records: Sequence[EvalRecord], summary: EvalSummary, **meta: object) -> None:
    """`records.jsonl` (one record a line), `summary.json` (the meta, then the summary) and, where
    episodes kept one, `transcripts.jsonl.gz`: one {task_id, sample, transcript} a line, gzip'd."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "records.jsonl", "w") as f:
        for rec in records:
            f.write(rec.model_dump_json() + "\n")
    kept = [r for r in records if r.transcript is not None]
    if kept:
        with gzip.open(out_dir / TRANSCRIPTS, "wt", encoding="utf-8") as z:
            for rec in kept:
                z.write(
                    json.dumps(
                        {"task_id": rec.task_id, "sample": rec.sample, "transcript": rec.transcript}, default=str
                    )
                    + "\n"
                )
    (out_dir / "summary.json").write_text(json.dumps({**meta, **summary.model_dump()}, indent=2) + "\n")
