"""Where a direction check takes its truth from, apart from the trainer (F57).

A check that reads its expected rewards and its audit reference from the trainer's own batch is
blind to every fault upstream of that batch: a reward inverted where it is computed, a GRPO arm
wired through the permuted control, a generator that drops or shifts a sampled token. So the truth
comes from two sources the trainer does not own:

- **the sampler's own output** (`SamplerLog`): every generation the engine returned, ids as
  sampled, recorded where `LocalEngine.run_here` hands them back, before dagent's generator or TRL
  touch them. `sampler_audit` then holds each rollout of a batch to it: the runs of tokens the loss
  trains are the engine's generations for that rollout, whole and in order (the last one may stop
  short only where the completion reached its budget), and nothing else is trained;
- **the grader's verdict** (`verdicts`): each rollout's answer read from the text the engine
  sampled (its `submit_solution` call), graded by `dagent.grading` against the task's gold. Rewards
  of 1 (correct), 0 (wrong) and None (ungraded) order the rollouts of a group as the environment's
  reward must; `advantage_signs` compares the batch's advantages with them.

    with SamplerLog() as log:
        batch = trainer._generate_and_score_completions(inputs)
    problems = sampler_audit(batch, log, max_completion_length=192)
    truth = verdicts(suite, task_ids, log.texts(batch, tokenizer))
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dagent.engine.generation import LocalEngine
from dagent.grading.dispatch import grade
from dagent.train.verify.batch import Record
from dagent.train.verify.direction import Direction, DirectionError, Snapshot, group_advantages, verify

__all__ = [
    "SamplerLog",
    "advantage_signs",
    "capture_audit",
    "sampler_audit",
    "turns_audit",
    "submitted_answer",
    "verdicts",
    "verify_signal",
]

_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class SamplerLog:
    """Every (prompt ids, sampled ids) the local engine returned while open (a context manager that
    wraps `LocalEngine.run_here` for its duration)."""

    def __init__(self) -> None:
        self.generations: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self._original: Any = None

    def __enter__(self) -> SamplerLog:
        self._original = original = LocalEngine.run_here
        log = self

        def run_here(engine: Any, requests: list[Any]) -> Any:
            generations = original(engine, requests)
            for request, generation in zip(requests, generations, strict=True):
                log.generations.append((tuple(request.prompt_ids), tuple(generation.token_ids)))
            return generations

        LocalEngine.run_here = run_here  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        LocalEngine.run_here = self._original  # type: ignore[method-assign]

    def turns(self, full: Sequence[int]) -> list[tuple[int, list[tuple[int, ...]]]]:
        """The generations that could be the sequence `full`'s (prompt then completion) turns: those whose
        prompt is a prefix of it, as (prompt length, candidates), shortest prompt first (a group's
        rollouts share their first prompt, so each turn lists every candidate)."""
        by_turn: dict[int, list[tuple[int, ...]]] = {}
        for prompt, sampled in self.generations:
            if len(prompt) <= len(full) and tuple(full[: len(prompt)]) == prompt:
                by_turn.setdefault(len(prompt), []).append(sampled)
        return sorted(by_turn.items())


def _rows(batch: dict[str, Any]) -> list[tuple[list[int], list[int], list[int]]]:
    """Per rollout: (prompt ids without padding, completion ids without padding, loss mask over them)."""
    out = []
    mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
    for i in range(batch["completion_ids"].shape[0]):
        pm, cm = batch["prompt_mask"][i].bool(), batch["completion_mask"][i].bool()
        out.append((batch["prompt_ids"][i][pm].tolist(), batch["completion_ids"][i][cm].tolist(), mask[i][cm].tolist()))
    return out


def _runs(ids: Sequence[int], mask: Sequence[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    inside = False
    for token, m in zip(ids, mask, strict=True):
        if m and not inside:
            runs.append([])
        if m:
            runs[-1].append(token)
        inside = bool(m)
    return runs


def sampler_audit(batch: dict[str, Any], log: SamplerLog, *, max_completion_length: int) -> list[str]:
    """Where the batch's trained tokens are not the engine's sampled ones (module docstring): per
    rollout, its trained runs against the generations whose prompt it continues, turn by turn."""
    rows = _rows(batch)
    turns = [[gs for _, gs in log.turns(prompt + completion)] for prompt, completion, _ in rows]
    return turns_audit(rows, turns, budget=max_completion_length)


def capture_audit(batch: dict[str, Any], completions: Sequence[Sequence[Sequence[int]]]) -> list[str]:
    """The black-box loop's `sampler_audit`: each rollout's trained runs against the engine's own
    completions of its agent calls as the capture proxy recorded them (`completions[i]`, in order)."""
    return turns_audit(_rows(batch), [[[tuple(c)] for c in calls] for calls in completions], budget=None)


def turns_audit(
    rows: Sequence[tuple[list[int], list[int], list[int]]],
    turns: Sequence[Sequence[Sequence[tuple[int, ...]]]],
    *,
    budget: int | None,
) -> list[str]:
    """Per rollout, its trained runs must be one candidate of each turn, whole and in order; the last may
    stop short only where the completion reached `budget` tokens."""
    problems = []
    for i, ((_, completion, mask), sampled_turns) in enumerate(zip(rows, turns, strict=True)):
        runs = _runs(completion, mask)
        if not sampled_turns:
            problems.append(f"rollout {i}: no generation of the engine continues its prompt")
            continue
        if len(runs) != len(sampled_turns):
            problems.append(f"rollout {i}: {len(runs)} trained runs for {len(sampled_turns)} turns the engine sampled")
            continue
        full = budget is not None and len(completion) >= budget
        for k, (run, sampled) in enumerate(zip(runs, sampled_turns, strict=True)):
            last = k == len(runs) - 1
            if any(tuple(run) == g or (last and full and g[: len(run)] == tuple(run)) for g in sampled):
                continue
            closest = _closest(sampled, run)
            n = next((j for j, (a, b) in enumerate(zip(run, closest)) if a != b), min(len(run), len(closest)))
            problems.append(
                f"rollout {i}, turn {k}: the loss trains {len(run)} tokens where the engine sampled "
                f"{len(closest)}, first differing at token {n}"
            )
            break
    return problems


def submitted_answer(text: str) -> str | None:
    """The answer of the first `submit_solution` call in a completion's text, or None."""
    for match in _CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(call, dict) and call.get("name") == "submit_solution":
            answer = (call.get("arguments") or {}).get("answer")
            return None if answer is None else str(answer)
    return None


def _closest(candidates: Sequence[tuple[int, ...]], continuation: Sequence[int]) -> tuple[int, ...]:
    """The candidate generation the sequence took: the one its continuation starts with, else the one
    agreeing with it at most positions."""
    return max(
        candidates, key=lambda g: (tuple(continuation[: len(g)]) == g, sum(a == b for a, b in zip(g, continuation)))
    )


def sampled_texts(batch: dict[str, Any], log: SamplerLog, tokenizer: Any) -> list[str]:
    """Each rollout's text as the engine sampled it: at each turn the generation its sequence took
    (a group's rollouts share their first prompt: the one its completion continues with), decoded."""
    out = []
    for prompt, completion, _ in _rows(batch):
        full = prompt + completion
        out.append(
            "".join(
                tokenizer.decode(list(_closest(gs, full[start:])), skip_special_tokens=False)
                for start, gs in log.turns(full)
            )
        )
    return out


def verdicts(suite: Any, task_ids: Sequence[str], texts: Sequence[str]) -> list[float | None]:
    """1.0 / 0.0 / None per rollout: the grader's verdict on the answer its sampled text submitted."""
    out: list[float | None] = []
    for task_id, text in zip(task_ids, texts, strict=True):
        _, _, task = suite.find(task_id)
        g = grade(task, submitted_answer(text))
        out.append(None if g.correct is None else float(g.correct))
    return out


def advantage_signs(advantages: Sequence[float], truth: Sequence[float | None], group: int) -> list[str]:
    """Where the batch's advantages disagree in sign with the ones the grader's verdicts give, on the
    rollouts the verdicts give an advantage (within a group the verdicts score alike, the reward may
    still rank by its tool-call term)."""
    expected = group_advantages(truth, group)
    return [
        f"rollout {i}: advantage {a:+.2f} where the grader's verdicts give {e:+.2f}"
        for i, (a, e) in enumerate(zip(advantages, expected, strict=True))
        if e != 0 and (a > 0) != (e > 0)
    ]


def verify_signal(
    trainer: Any,
    batch: dict[str, Any],
    record: Record,
    truth: Sequence[float | None],
    group: int,
    *,
    audit: Sequence[str],
    snapshot: Snapshot | None = None,
    measured: Direction | None = None,
) -> Direction:
    """The direction check with its truth from outside the trainer: `audit`, the batch against the
    sampler's own output (`sampler_audit`, or the capture's for the black-box loop), must be empty;
    the batch's advantages must agree in sign with the grader's verdicts `truth`; then
    `dagent.train.verify.direction.verify` judges one step by the verdicts' advantages. DirectionError
    names the first that fails."""
    if audit:
        raise DirectionError(
            "the loss trains tokens the sampler did not produce (F57, the sampler's own output): "
            + "; ".join(audit[:3])
        )
    if wrong := advantage_signs(batch["advantages"].tolist(), truth, group):
        raise DirectionError(
            "the batch's advantages disagree with the grader's verdicts on the sampled answers "
            "(F57: a reward computed wrong, or an arm wired to other rewards): " + "; ".join(wrong[:3])
        )
    return verify(trainer, batch, record, truth, group, snapshot=snapshot, measured=measured)
