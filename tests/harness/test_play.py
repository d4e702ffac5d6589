"""The episode skeleton (`dagent.harness.play.play`): one set of failure rules for every agent."""

from __future__ import annotations

import json

import pytest

from dagent.core.task import ANSWER_PATH
from dagent.errors import SandboxError, StagingError
from dagent.harness.base import AgentRun, sample_seed
from dagent.harness.oracle import OracleAgent
from dagent.harness.play import play, run_eval
from dagent.sandbox.base import ExecResult


class Scripted:
    """An LLM-shaped agent that writes `answer` (or nothing) and reports what it is told to."""

    name, model = "scripted", "fake-model"

    def __init__(
        self,
        answer: str | None,
        *,
        model_calls: int = 2,
        tool_calls: int = 1,
        cause=None,
        raise_error: Exception | None = None,
        result: ExecResult | None = None,
    ) -> None:
        self.answer, self.model_calls, self.tool_calls, self.cause = answer, model_calls, tool_calls, cause
        self.raise_error, self.result, self.seeds = raise_error, result, []

    def run(self, task, sandbox, *, timeout_s=None, seed=None) -> AgentRun:
        self.seeds.append(seed)
        if self.raise_error is not None:
            raise self.raise_error
        if self.answer is not None:
            sandbox.write_file(ANSWER_PATH, self.answer)
        return AgentRun(
            exec_result=self.result, model_calls=self.model_calls, tool_calls=self.tool_calls, cause=self.cause
        )


class Broken:
    """A backend whose sandboxes cannot be created, or cannot stage."""

    remote = False

    def __init__(self, inner, *, at: str) -> None:
        self.inner, self.at = inner, at

    def create(self, resources):
        if self.at == "create":
            raise SandboxError("no sandbox today")
        box = self.inner.create(resources)

        def stage(files):
            raise StagingError("directory empty after staging (F21)")

        box.stage = stage
        return box


@pytest.mark.failure_mode("F16")
def test_the_oracle_goes_through_the_answer_file_and_a_bad_reference_shows(suite, backend):
    # the demo tasks' reference program prints 42 where gold is 3: the oracle must NOT score it
    rec = play(suite, "train", 0, OracleAgent(), backend).record
    assert (rec.outcome, rec.answer, rec.reward, rec.model, rec.tool_calls) == ("wrong", "42\n", 0.0, None, 1)


def test_the_reward_counts_the_agents_own_tool_calls(suite, backend):
    few = play(suite, "train", 0, Scripted("3", tool_calls=1), backend).record
    many = play(suite, "train", 0, Scripted("3", tool_calls=30), backend).record
    assert few.outcome == many.outcome == "correct" and few.reward > many.reward > 1.0


def test_no_answer_file_is_graded_wrong_with_reward_zero(suite, backend):
    rec = play(suite, "train", 0, Scripted(None), backend).record
    assert (rec.outcome, rec.reward, rec.cause) == ("wrong", 0.0, None)


@pytest.mark.failure_mode("F07")
def test_zero_model_calls_void_an_answer_left_behind(suite, backend):
    rec = play(suite, "train", 0, Scripted("3", model_calls=0), backend).record
    assert (rec.outcome, rec.reward, rec.cause) == ("ungraded", None, "zero_model_calls")


@pytest.mark.failure_mode("F07")
def test_an_engine_failure_voids_the_answer(suite, backend):
    rec = play(suite, "train", 0, Scripted("3", cause="engine_unreachable"), backend).record
    assert (rec.outcome, rec.reward, rec.cause) == ("ungraded", None, "engine_unreachable")


@pytest.mark.failure_mode("F18")
def test_oom_without_an_answer_is_ungraded_with_the_cause(suite, backend):
    oom = ExecResult(exit_code=137, stdout="", stderr="", oom_killed=True)
    rec = play(suite, "train", 0, Scripted(None, result=oom), backend).record
    assert (rec.outcome, rec.reward, rec.cause, rec.exit_code) == ("ungraded", None, "sandbox_oom", 137)


@pytest.mark.failure_mode("F32")
@pytest.mark.parametrize("at, cause", [("create", "sandbox_unavailable"), ("stage", "staging_failed")])
def test_infrastructure_before_the_agent_is_ungraded_data(suite, backend, at, cause):
    agent = Scripted("3")
    rec = play(suite, "train", 0, agent, Broken(backend, at=at)).record
    assert (rec.outcome, rec.reward, rec.cause) == ("ungraded", None, cause) and agent.seeds == []


def test_a_sandbox_failing_under_the_agent_is_ungraded(suite, backend):
    rec = play(suite, "train", 0, Scripted("3", raise_error=SandboxError("the sandbox died")), backend).record
    assert (rec.outcome, rec.cause, rec.note) == ("ungraded", "sandbox_error", "the sandbox died")


def test_samples_get_distinct_stable_seeds_and_records_in_order(suite, backend, tmp_path):
    agent = Scripted("3")
    records, summary = run_eval(suite, "train", agent, backend, workers=2, limit=2, samples=3, out_dir=tmp_path)
    assert [(r.index, r.sample) for r in records] == [(i, s) for i in range(2) for s in range(3)]
    assert sorted(agent.seeds) == sorted(sample_seed(r.task_id, r.sample) for r in records)
    assert len(set(agent.seeds)) == 6 and sample_seed("a", 0) == sample_seed("a", 0)
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["model"] == "fake-model"
    assert json.loads((tmp_path / "summary.json").read_text())["tasks"] == summary.tasks == 6


class Talking(Scripted):
    """A scripted agent whose run leaves a conversation, as the tool loop's does."""

    def run(self, task, sandbox, *, timeout_s=None, seed=None) -> AgentRun:
        run = super().run(task, sandbox, timeout_s=timeout_s, seed=seed)
        messages = [
            {"role": "user", "content": task.instruction},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "submit_solution", "arguments": {"answer": "3"}}}],
            },
        ]
        return AgentRun(exec_result=run.exec_result, model_calls=2, tool_calls=1, metadata={"messages": messages})


def test_every_record_keeps_its_transcript_beside_the_records(suite, backend, tmp_path):
    """The transcript travels with the record (not in records.jsonl): transcripts.jsonl.gz, keyed by
    (task, sample), read back by dagent.eval.recordings.load_transcripts, also as published (NAME.jsonl)."""
    import shutil

    from dagent.eval.recordings import load_transcripts
    from dagent.eval.report import load_records

    records, _ = run_eval(suite, "train", Talking("3"), backend, workers=1, limit=2, samples=2, out_dir=tmp_path)
    assert all(r.transcript and r.transcript[0]["role"] == "user" for r in records)
    assert "transcript" not in (tmp_path / "records.jsonl").read_text()  # records.jsonl stays lean
    kept = load_transcripts(tmp_path)
    assert sorted(kept) == sorted((r.task_id, r.sample) for r in records)
    r = records[1]
    assert kept[(r.task_id, r.sample)][0]["content"] == suite.task_at("train", r.index).instruction
    assert [x.transcript for x in load_records(tmp_path)] == [None] * 4  # records read back without it
    shutil.copy(tmp_path / "records.jsonl", tmp_path / "grpo.jsonl")  # published as the learning runs publish
    shutil.copy(tmp_path / "transcripts.jsonl.gz", tmp_path / "grpo.transcripts.jsonl.gz")
    assert load_transcripts(tmp_path / "grpo.jsonl") == kept
    oracle, _ = run_eval(suite, "train", OracleAgent(), backend, workers=1, limit=1, out_dir=tmp_path / "oracle")
    assert oracle[0].transcript is None and not (tmp_path / "oracle" / "transcripts.jsonl.gz").exists()
