"""Black-box rollouts as TRL's `GRPOTrainer(rollout_func=...)` wants them (the sync path).

TRL 1.16 calls `rollout_func(prompts, trainer)` with this process's prompts, each repeated
`num_generations` times in a row (its RepeatSampler: consecutive prompts form a GRPO group), and
expects one row per prompt: `prompt_ids`, `completion_ids`, `logprobs`, and optionally `env_mask`
(1 on tokens the model produced, 0 on everything else); other keys reach the reward functions.

`BlackBoxRollouts` runs one black-box rollout per prompt (the agent owns its loop: opencode, or
another harness, in a sandbox, every model call through capture to an engine serving the trainer's
CURRENT weights), concurrently, and converts each rollout's agent chain with TRL's OWN conversion,
the code its async `HarnessRolloutWorker` runs: `TrainingTrace.from_entries` ->
`_turns_from_training_trace` -> `_chain_to_sequences`. So what this path trains is exactly what
TRL's loop-owning path would build from the same capture:

- the prompt is the engine's prompt ids of the chain's first call; the completion is everything
  after it, tool results and later prompts' new tokens included; `env_mask` is TRL's completion
  mask (1 on the engine's own completion tokens, 0 on all else); `logprobs` are the engine's
  (0.0 on masked positions);
- only the AGENT chain is exported (`Rollout.trace_entries`): auxiliary calls (a title
  generator, a summariser) and sub-agents never reach the trainer (F03);
- the reward rides along as the extra field `env_reward`: `None` (ungraded, with a cause) stays
  `None` (TRL then leaves the rollout out of its group's baseline, advantage 0; F32);
- a chain that TRL would split into several rows (a FORK: re-tokenisation drifted past the
  threshold) cannot be one row of the sync trainer: its reward becomes None (no row trains a
  part of a chain under the whole chain's reward) and it is counted (`blackbox/forked_dropped`);
- a rollout with nothing trainable (ungraded before any call, unusable logprobs) gets a
  one-token placeholder completion with mask 0: it trains nothing.

Every row is audited before TRL sees it (`token_audit`): the tokens under mask 1 are, in order,
exactly the completion ids the engine returned for the chain's calls (the exact-token receipt).
Receipts per rollout go to `receipts.jsonl` in the output directory.

A group's rollouts must be independent draws (F61): each rollout is its own sample of the task
(`rollout_sample`: the run's seed, the trainer's step and the rollout's number, so a rerun draws the
same and a resumed run fresh ones), and `check_group_seeds` refuses a step in which two rollouts of
one group were sampled from the same seed, as capture recorded it. Measured on the powered run's
first GRPO seed (lab/notebook.md, sitting 3): every rollout went out as sample 0 of its task, 62 of
80 groups were eight identical rollouts, 35 of 40 steps had no gradient, and nothing failed.
`blackbox/identical_groups` logs the fraction of groups whose rollouts are token-identical, whatever
the cause.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError, TrajectoryError
from dagent.runtime.blackbox import Rollout
from dagent.train.routing import route
from dagent.train.trl_seams import CHAIN_TO_SEQUENCES, METRICS, TURNS_FROM_TRACE, trl_attr
from dagent.trajectory.analysis import AGENT

REWARD_FIELD = "env_reward"
_STEP_SHIFT, _RUN_SHIFT = 20, 40  # a step's rollouts below 2**20, steps below 2**20


class SharedSeedError(TrajectoryError):
    """Two rollouts of one GRPO group were drawn from the same sampling seed (F61)."""


def rollout_sample(seed: int, step: int, ordinal: int) -> int:
    """The sample number of rollout `ordinal` of trainer step `step` in a run seeded `seed`: distinct
    for every rollout of a run, the same in a rerun (`dagent.harness.base.sample_seed` hashes it with
    the task id into the engine's seed)."""
    return (seed << _RUN_SHIFT) | (step << _STEP_SHIFT) | ordinal


def check_group_seeds(rows: Sequence[TrainRow], num_generations: int) -> None:
    """Refuse a step where two rollouts of one group share the sampling seed capture recorded on their
    first agent call (F61): they are the same draw, the group's rewards cannot differ by sampling, and
    its advantages are zero. None (an unseeded call) never collides."""
    for start in range(0, len(rows), num_generations):
        group = rows[start : start + num_generations]
        seeds = [r.seed for r in group if r.seed is not None]
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        if repeated:
            raise SharedSeedError(
                f"group {start // num_generations} ({group[0].task_id}): rollouts sampled from the same seed "
                f"{repeated[0]} ({seeds.count(repeated[0])} of {len(group)}): identical draws give the group no "
                "advantage. Give each rollout its own sample (run_rollout(sample=...), rollout_sample) or none"
            )


def identical_groups(rows: Sequence[TrainRow], num_generations: int) -> float:
    """The fraction of groups whose rollouts trained the same tokens, every one (F61's symptom)."""
    groups = [rows[i : i + num_generations] for i in range(0, len(rows), num_generations)]
    alike = [
        g
        for g in groups
        if len(g) > 1 and g[0].trained_tokens and all(r.completion_ids == g[0].completion_ids for r in g)
    ]
    return len(alike) / len(groups) if groups else 0.0


@dataclass(frozen=True)
class TrainRow:
    """One rollout as the sync trainer takes it, with its receipts."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    env_mask: tuple[int, ...]
    reward: float | None
    harness: str
    task_id: str
    outcome: str
    cause: str | None = None
    sequences: int = 0  # rows TRL's conversion made of the chain (1 = the whole chain)
    tally: Mapping[str, float] = field(default_factory=dict)  # TRL's drift tally (clean/realign/fork)
    agent_turns: int = 0
    other_calls: int = 0  # captured calls NOT on the agent chain (auxiliary, sub-agent, discarded)
    tool_calls: int = 0
    audit: str = ""  # "exact", or what differs
    dropped: str | None = None  # why this rollout trains nothing
    seed: int | None = None  # the sampling seed capture recorded on the first agent call (None: unseeded)

    @property
    def trained_tokens(self) -> int:
        return sum(self.env_mask)

    def receipt(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
            out.pop(k)
        out.update(
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.completion_ids),
            trained_tokens=self.trained_tokens,
            tally=dict(self.tally),
        )
        return out


def chain_sequences(
    trace_entries: list[dict[str, Any]], fork_threshold: int, rollout_id: str | None = None
) -> tuple[list[Any], dict[str, float]]:
    """TRL's own conversion of an agent chain (its HarnessRolloutWorker's code path)."""
    from openenv.core.harness import TrainingTrace

    turns = trl_attr(TURNS_FROM_TRACE)(TrainingTrace.from_entries(trace_entries))
    return trl_attr(CHAIN_TO_SEQUENCES)(turns, rollout_id or uuid.uuid4().hex, fork_threshold)


def token_audit(
    completion_ids: Sequence[int], env_mask: Sequence[int], engine_completions: Sequence[Sequence[int]]
) -> str:
    """Whether every token under mask 1 is the engine's own: each run of trained tokens must be the
    next call's engine completion, whole ("exact"), or its prefix where TRL's conversion REALIGNED
    the rest (a harness that re-serialises its last answer: the drifted tail is overwritten with
    what the next prompt holds and kept as context, mask 0), never a token the engine did not
    produce there. Returns "exact", "exact; N realigned: M engine tokens kept as context", or what
    differs."""
    runs: list[list[int]] = []
    current: list[int] | None = None
    for token, m in zip(completion_ids, env_mask, strict=True):
        if not m:
            current = None
            continue
        if current is None:
            current = []
            runs.append(current)
        current.append(token)
    want = [list(c) for c in engine_completions if c]
    if len(runs) != len(want):
        return f"{len(runs)} trained runs for {len(want)} engine calls: a call boundary or a call was lost"
    realigned = context = 0
    for k, (run, engine) in enumerate(zip(runs, want)):
        if run == engine:
            continue
        if len(run) < len(engine) and engine[: len(run)] == run:
            realigned, context = realigned + 1, context + len(engine) - len(run)
            continue
        n = next((i for i, (a, b) in enumerate(zip(run, engine)) if a != b), min(len(run), len(engine)))
        return (
            f"call {k}: trained token {n} differs from the engine's ({len(run)} trained, {len(engine)} produced "
            "by the engine)"
        )
    return "exact" if not realigned else f"exact; {realigned} realigned: {context} engine tokens kept as context"


def audit_clean(audit: str) -> bool:
    """A row's audit passes: every trained token the engine's ("exact", realigned included) or none trained."""
    return audit.startswith("exact") or audit == "nothing trained"


def row_of(
    rollout: Rollout, harness: str, fork_threshold: int, placeholder: Callable[[], tuple[list[int], list[int]]]
) -> TrainRow:
    """One black-box `Rollout` -> the row the sync trainer trains (module docstring)."""
    entries = rollout.trace_entries()
    trajectory = rollout.trajectory
    common = dict(
        harness=harness,
        task_id=rollout.task_id,
        outcome=rollout.outcome,
        cause=rollout.cause,
        agent_turns=len(entries),
        tool_calls=rollout.tool_calls or 0,
        other_calls=sum(1 for role in trajectory.roles if role != AGENT),
    )
    chain = trajectory.chain_turns()
    first_seed = (chain[0].metadata.get("sampling_params") or {}).get("seed") if chain else None
    common["seed"] = first_seed if type(first_seed) is int else None
    reward = rollout.reward
    sequences, tally = chain_sequences(entries, fork_threshold) if entries else ([], {})
    dropped = None
    if len(sequences) == 1:
        seq = sequences[0]
        first = seq.completion_mask.index(1)
        completion, mask = list(seq.input_ids[first:]), list(seq.completion_mask[first:])
        engine = [e["completion_token_ids"] for e in entries if any(e["loss_mask"])]
        audit = token_audit(completion, mask, engine)
        if not audit.startswith("exact"):
            raise TrajectoryError(
                f"rollout of {rollout.task_id}: {audit}; the capture or TRL's conversion changed "
                "a token the engine produced: nothing from this run may be trained"
            )
        return TrainRow(
            prompt_ids=tuple(seq.input_ids[:first]),
            completion_ids=tuple(completion),
            logprobs=tuple(float(x) for x in seq.old_log_probs[first:]),
            env_mask=tuple(mask),
            reward=reward,
            sequences=1,
            tally=tally,
            audit=audit,
            **common,
        )
    if len(sequences) > 1:
        dropped, reward = f"forked: TRL's conversion makes {len(sequences)} rows of this chain", None
    elif rollout.outcome == "ungraded":
        dropped = f"ungraded: {rollout.cause}"
    else:
        dropped = "no trainable token in the agent chain"
    prompt_ids, completion_ids = placeholder()
    return TrainRow(
        prompt_ids=tuple(prompt_ids),
        completion_ids=tuple(completion_ids),
        logprobs=(0.0,) * len(completion_ids),
        env_mask=(0,) * len(completion_ids),
        reward=reward,
        sequences=len(sequences),
        tally=tally,
        audit="nothing trained",
        dropped=dropped,
        **common,
    )


def env_reward(
    prompts: list[Any], completions: list[Any], env_reward: list[float | None] | None = None, **kwargs: Any
) -> list[float | None]:
    """The reward function of the sync trainer: the environment's own reward, graded server side
    (None stays None, F32). Module level, so it imports by name in a spawned child."""
    if env_reward is None:
        raise ConfigError("no `env_reward` field reached the reward function: it comes from BlackBoxRollouts")
    return [None if r is None else float(r) for r in env_reward]


class BlackBoxRollouts:
    """`rollout_func` for `GRPOTrainer`: one black-box rollout per prompt (module docstring).

    `runtimes` maps a harness name to a started runtime with `suite` and `run_rollout(split,
    index)` (`dagent.runtime.blackbox.BlackBoxRuntime`); groups are routed to harnesses by group id
    (`dagent.train.routing`, F40). `engine` (an `InProcessEngine`) is put in its generating mode
    around the rollouts (eval mode, prefix cache emptied after the last optimizer step)."""

    def __init__(
        self,
        runtimes: Mapping[str, Any],
        split: str,
        tokenizer: Any,
        *,
        num_generations: int,
        engine: Any = None,
        fork_threshold: int = 1024,
        workers: int | None = None,
        receipts: str | Path | None = None,
        timeout_s: float | None = None,
        seed: int = 0,
    ) -> None:
        """`seed`: the run's seed, which `rollout_sample` folds into every rollout's sample (F61)."""
        if not runtimes:
            raise ConfigError("no harness runtime given: start at least one (opencode)")
        self.runtimes, self.split, self.tokenizer = dict(runtimes), split, tokenizer
        self.harnesses = list(self.runtimes)
        self.num_generations, self.engine, self.fork_threshold = num_generations, engine, fork_threshold
        self.workers, self.timeout_s, self.seed = workers, timeout_s, seed
        self.receipts = Path(receipts) if receipts else None
        self.groups_seen = self.rollouts_seen = 0  # in this process (the step number tells a resumed run apart)
        self.rows: list[TrainRow] = []  # every row handed to the trainer (receipts)
        self._lock = threading.Lock()
        self._placeholder: tuple[list[int], list[int]] | None = None
        self.suite = next(iter(self.runtimes.values())).suite

    # -- the rollout function -----------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        from dagent.envs.blackbox_session import instruction_of

        if len(prompts) % self.num_generations:
            raise ConfigError(
                f"{len(prompts)} prompts is not a whole number of groups of {self.num_generations}: "
                "generation_batch_size must divide by num_generations"
            )
        jobs = []
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        for k, prompt in enumerate(prompts):
            instruction = instruction_of(prompt)
            if instruction is None:
                raise ConfigError(
                    f"cannot tell which task the prompt {str(prompt)[:80]!r} names: train on TaskSuite.prompt_rows rows"
                )
            index, _ = self.suite.resolve_prompt(self.split, instruction)  # F11, F12: exactly as rollouts do
            group = self.groups_seen + k // self.num_generations
            sample = rollout_sample(self.seed, step, self.rollouts_seen + k)  # its own draw (F61)
            jobs.append((index, route(group, self.harnesses), sample))
        self.groups_seen += len(prompts) // self.num_generations
        self.rollouts_seen += len(prompts)
        started = time.monotonic()
        with self.engine.generating() if self.engine is not None else contextlib.nullcontext():
            with ThreadPoolExecutor(max_workers=self.workers or len(jobs)) as pool:
                futures = [pool.submit(self._one, *job) for job in jobs]
                if self.engine is not None:  # this (the trainer's main) thread computes the steps
                    self.engine.serve_until(futures)
                rows = [f.result() for f in futures]
        self._record(rows, trainer, time.monotonic() - started)
        check_group_seeds(rows, self.num_generations)
        return {
            "prompt_ids": [list(r.prompt_ids) for r in rows],
            "completion_ids": [list(r.completion_ids) for r in rows],
            "logprobs": [list(r.logprobs) for r in rows],
            "env_mask": [list(r.env_mask) for r in rows],
            REWARD_FIELD: [r.reward for r in rows],
        }

    def _one(self, index: int, harness: str, sample: int) -> TrainRow:
        rollout = self.runtimes[harness].run_rollout(self.split, index, timeout_s=self.timeout_s, sample=sample)
        return row_of(rollout, harness, self.fork_threshold, self.placeholder)

    def placeholder(self) -> tuple[list[int], list[int]]:
        """A one-token prompt and completion that train nothing (mask 0)."""
        if self._placeholder is None:
            eos = self.tokenizer.eos_token_id
            if isinstance(eos, list):
                eos = eos[0]
            self._placeholder = ([int(eos)], [int(eos)])
        return self._placeholder

    # -- receipts and metrics -------------------------------------------------------------------
    def _record(self, rows: list[TrainRow], trainer: Any, seconds: float) -> None:
        with self._lock:
            self.rows.extend(rows)
        if self.receipts is not None:
            self.receipts.parent.mkdir(parents=True, exist_ok=True)
            with self.receipts.open("a") as f:
                for r in rows:
                    f.write(json.dumps(r.receipt()) + "\n")
        metrics = getattr(trainer, METRICS, None)
        if metrics is None:
            return
        train = metrics["train"]
        train["blackbox/identical_groups"].append(identical_groups(rows, self.num_generations))
        for name, value in rollout_metrics(rows).items():
            train[name].append(value)
        train["time/rollouts_s"].append(seconds)


def rollout_metrics(rows: Sequence[TrainRow]) -> dict[str, float]:
    """What the trainer logs per step about its rollouts (the reference run's receipts among them:
    samples per rollout 1.00 and fork fraction 0 when every chain is one row)."""
    n = max(1, len(rows))
    transitions = sum(r.tally.get("transitions", 0.0) for r in rows)
    out = {
        "blackbox/samples_per_rollout": sum(r.sequences for r in rows) / n,
        "blackbox/fork_frac": sum(r.tally.get("fork", 0.0) for r in rows) / transitions if transitions else 0.0,
        "blackbox/realign_frac": sum(r.tally.get("realign", 0.0) for r in rows) / transitions if transitions else 0.0,
        "blackbox/forked_dropped": float(sum(1 for r in rows if (r.dropped or "").startswith("forked"))),
        "blackbox/agent_turns": sum(r.agent_turns for r in rows) / n,
        "blackbox/other_calls": sum(r.other_calls for r in rows) / n,
        "blackbox/trained_tokens": sum(r.trained_tokens for r in rows) / n,
        "blackbox/tool_calls": sum(r.tool_calls for r in rows) / n,
        "ungraded/total": float(sum(1 for r in rows if r.outcome == "ungraded")),
    }
    for cause, count in Counter((r.cause or "unknown").split(":")[0] for r in rows if r.outcome == "ungraded").items():
        out[f"ungraded/{cause}"] = float(count)
    by_harness: dict[str, list[TrainRow]] = defaultdict(list)
    for r in rows:
        by_harness[r.harness].append(r)
    for harness, its in by_harness.items():
        graded = [r.reward for r in its if r.reward is not None]
        out[f"harness/{harness}/rollouts"] = float(len(its))
        if graded:
            out[f"harness/{harness}/reward_mean"] = sum(graded) / len(graded)
    return out
