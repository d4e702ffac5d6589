"""Run agents over a split: sandbox per task, stage, run, read the answer file, grade, record.

One path for every agent, the oracle included: the answer is whatever ends up in
/workdir/answer.txt, graded server side with the full task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from dagent.errors import SandboxError, StagingError
from dagent.evaluation import EvalRecord, EvalSummary, outcome_of, settle, summarize
from dagent.harness.base import Agent, AgentRun
from dagent.sandbox.base import Resources, SandboxBackend
from dagent.suite import TaskSuite
from dagent.task import ANSWER_PATH, Task

ANSWER_CLIP = 500


def _record(task: Task, split: str, index: int, agent: str, grade, run: AgentRun | None,
            answer: bytes | None, cause: str | None, started: float) -> EvalRecord:
    text = None if answer is None else answer[: ANSWER_CLIP * 4].decode("utf-8", "replace")[:ANSWER_CLIP]
    return EvalRecord(
        task_id=task.task_id,
        split=split,
        index=index,
        difficulty_tier=task.difficulty_tier,
        agent=agent,
        outcome=outcome_of(grade),
        reward=grade.reward,
        correct=grade.correct,
        method=grade.method,
        note=grade.note,
        cause=cause if grade.correct is None else None,
        answer=text,
        exit_code=None if run is None or run.exec_result is None else run.exec_result.exit_code,
        model_calls=None if run is None else run.model_calls,
        tool_calls=None if run is None else run.tool_calls,
        duration_s=round(time.monotonic() - started, 4),
    )


def run_episode(suite: TaskSuite, split: str, index: int, agent: Agent, backend: SandboxBackend,
                *, timeout_s: float = 300.0) -> EvalRecord:
    """One task, end to end. Infrastructure failures come back as ungraded records, never raise."""
    from dagent.grading import Grade

    started = time.monotonic()
    task = suite.task_at(split, index)
    resources = Resources(cpus=task.cpus, memory_mb=task.memory_mb, timeout_s=timeout_s)

    def ungraded(cause: str, note: str) -> EvalRecord:
        grade = Grade(reward=None, correct=None, method="ungraded", note=note)
        return _record(task, split, index, agent.name, grade, None, None, cause, started)

    try:
        sandbox = backend.create(resources)
    except SandboxError as e:
        return ungraded("sandbox_unavailable", str(e))
    with sandbox:
        try:
            sandbox.stage(suite.files_for(task))
        except StagingError as e:
            return ungraded("staging_failed", str(e))
        try:
            run = agent.run(task, sandbox, timeout_s=timeout_s)
            answer = sandbox.read_file(ANSWER_PATH)
        except SandboxError as e:
            return ungraded("sandbox_error", str(e))
    grade = settle(task, answer, infra_cause=run.infra_cause, model_calls=run.model_calls)
    cause = grade.note if grade.correct is None else None
    return _record(task, split, index, agent.name, grade, run, answer, cause, started)


def run_eval(suite: TaskSuite, split: str, agent: Agent, backend: SandboxBackend, *,
             workers: int = 2, limit: int | None = None, timeout_s: float = 300.0,
             out_dir: Path | None = None,
             on_done: Callable[[EvalRecord], None] | None = None) -> tuple[list[EvalRecord], EvalSummary]:
    """Evaluate `agent` on `split` (optionally its first `limit` tasks) with `workers` threads.

    Writes `records.jsonl` (one record per task, in split order) and `summary.json` to
    `out_dir` when given.
    """
    n = len(suite.tasks(split))
    indices = list(range(n if limit is None else min(limit, n)))
    records: dict[int, EvalRecord] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(run_episode, suite, split, i, agent, backend, timeout_s=timeout_s): i
                   for i in indices}
        for fut in as_completed(futures):
            rec = fut.result()
            records[futures[fut]] = rec
            if on_done is not None:
                on_done(rec)
    ordered = [records[i] for i in indices]
    summary = summarize(ordered)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "records.jsonl", "w") as f:
            for rec in ordered:
                f.write(rec.model_dump_json() + "\n")
        (out_dir / "summary.json").write_text(json.dumps(
            {"split": split, "agent": agent.name, "suite": suite.source, **summary.model_dump()},
            indent=2) + "\n")
    return ordered, summary
