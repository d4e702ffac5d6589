"""Black-box GRPO: the AGENT owns its loop (opencode, or another harness), the trainer trains on
the tokens capture recorded.

Two modes (`jobs/train_blackbox.py --mode`):

- `sync` (a CPU, or any single process): TRL's `GRPOTrainer(rollout_func=...)`. The trainer's own
  module is served over HTTP from its process (`dagent.engine.inprocess.InProcessEngine`), so
  every rollout of a step is answered by the policy as it is at that step (on-policy, no weight
  transfer; the engine's dtype IS the trainer's, F06). Each rollout runs the harness in a local
  sandbox through the capture proxy, pinned to `RECIPE_SAMPLING` (the trainer's own sampling,
  F05), and comes back flattened by TRL's own conversion (`dagent.train.blackbox.rollouts`). The loss's
  forward and backward compute each group's shared prompt once (`dagent.train.blackbox.shared_prefix`).
- `async` (GPUs): TRL's `AsyncGRPOTrainer` with `HarnessRolloutWorker` and our session factory;
  see `dagent.train.blackbox.async_trainer` (config, engine, preflight). It cannot run on a CPU (TRL's
  tree attention needs a CUDA FlashAttention-3 kernel).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.engine.inprocess import InProcessEngine
from dagent.errors import ConfigError
from dagent.harness.opencode import OpencodeConfig
from dagent.harness.pi import PiConfig
from dagent.recipes import HARNESSES, BlackboxRecipe
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.train.assembly import Callbacks, callbacks, config_kwargs, train_and_save
from dagent.train.blackbox.args import ONE_PROCESS, BlackboxArgs
from dagent.train.blackbox.async_trainer import ASYNC_REFUSED, Launched, launch_async
from dagent.train.blackbox.plan import BlackboxPlan, plan_run
from dagent.train.blackbox.rollouts import BlackBoxRollouts, env_reward
from dagent.train.blackbox.shared_prefix import share_prompts
from dagent.train.options import Refusal
from dagent.train.preflight import Check, blackbox_checks, selected_rows
from dagent.train.routing import pad_coprime
from dagent.train.scoring import score_completions_only


def sync_fields(recipe: BlackboxRecipe) -> dict[str, Any]:
    """The sync path's own GRPOConfig fields, after those every path sets alike."""
    return dict(
        per_device_train_batch_size=recipe.batch,
        gradient_accumulation_steps=1,
        beta=recipe.beta,
        max_completion_length=recipe.max_output_tokens,
        logging_steps=1,
        use_cpu=recipe.use_cpu,
        bf16=recipe.bf16,
        use_vllm=False,
    )


def sync_config(
    recipe: BlackboxRecipe,
    output_dir: str | Path,
    *,
    report_to: str = "none",
    run_name: str | None = None,
    project: str = "dagent",
    **extra: Any,
) -> Any:
    """TRL's GRPOConfig for the sync path (rollout_func): the fields every path sets alike
    (`dagent.train.assembly`, sampling from RECIPE_SAMPLING, F05), then this path's own."""
    from trl import GRPOConfig

    common = config_kwargs(recipe, output_dir, report_to=report_to, run_name=run_name, project=project)
    return GRPOConfig(**{**common, **sync_fields(recipe), **extra})


@dataclass
class BlackboxRun:
    trainer: Any
    rollouts: BlackBoxRollouts  # its .rows are the receipts
    engine: Any
    runtimes: dict[str, Any]
    callbacks: Callbacks
    checks: list[Check] = field(default_factory=list)
    rows: int = 0

    @property
    def health(self) -> Any:
        return self.callbacks.health

    def stop(self) -> None:
        """Every process and server the run started, on any exit."""
        for runtime in self.runtimes.values():
            runtime.stop()
        if self.engine is not None:
            self.engine.stop()


def build_sync_trainer(
    model_dir: str | Path,
    suite: TaskSuite,
    recipe: BlackboxRecipe,
    output_dir: str | Path,
    *,
    harnesses: tuple[str, ...] = ("opencode",),
    policy: Any = None,
    served_name: str | None = None,
    backend: Any = "local",
    base_pass1: float | None = None,
    force: bool = False,
    report_to: str = "none",
    run_name: str | None = None,
    push_to_hub: str | None = None,
    max_minutes: float | None = None,
    sandbox_dir: str | Path | None = None,
    control: str = "none",
    rates: Any = None,
    mixed_only: bool = False,
    **config: Any,
) -> BlackboxRun:
    """GRPOTrainer(rollout_func=...) over the suite's `recipe.split`, the trainer's module served
    in-process (`policy` wraps it for tests, e.g. a steered stand-in over the same weights): the
    plan `dagent.train.blackbox.plan.plan_run` makes from a job's arguments, made from these, then
    `build_sync`. `config`: more GRPOConfig fields."""
    unknown = [h for h in harnesses if h not in HARNESSES]
    if unknown:
        raise ConfigError(f"unknown harness {unknown[0]!r}: use {', '.join(HARNESSES)}")
    prompts = suite.prompt_rows(recipe.split) if suite.tasks(recipe.split) else []
    selected, rates = selected_rows(prompts, rates, mixed_only=mixed_only)  # as plan_run: tasks checked, then padded
    checks = blackbox_checks(recipe, len(selected), base_pass1=base_pass1, force=force, rates=rates)
    rows = pad_coprime(selected, len(harnesses)) if selected else []  # every harness meets every task (F40)
    plan = BlackboxPlan(
        mode="sync",
        recipe=recipe,
        out=Path(output_dir),
        suite=suite,
        model=str(model_dir),
        path=Path(str(model_dir)),
        served=served_name or Path(str(model_dir)).name,
        harnesses=tuple(harnesses),
        rows=tuple(rows),
        checks=tuple(checks),
        config=config_kwargs(recipe, output_dir, report_to=report_to, run_name=run_name),
        callbacks=None,
        control=control,
    )
    calls = callbacks(suite, model_dir, plan.summary, control=control, push_to_hub=push_to_hub, max_minutes=max_minutes)
    plan = dataclasses.replace(plan, callbacks=calls)
    return build_sync(plan, policy=policy, backend=backend, sandbox_dir=sandbox_dir, config=config)


def build_sync(
    plan: BlackboxPlan,
    *,
    policy: Any = None,
    backend: Any = "local",
    sandbox_dir: str | Path | None = None,
    config: dict[str, Any] | None = None,
) -> BlackboxRun:
    """The sync mode's trainer from a plan: the trainer's module served in-process, a black-box
    runtime per harness against it, GRPOTrainer(rollout_func=BlackBoxRollouts) with the plan's
    callbacks, wrapped by the control where the plan names one."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dagent.envs.blackbox_session import check_sampling
    from dagent.train.control import controlled

    recipe, calls, path = plan.recipe, plan.callbacks, plan.path
    if calls is None or path is None:
        raise ConfigError("the plan has no model or callbacks (a dry run's plan): plan the run without --dry-run")
    score_completions_only()  # a CPU scores the completion's positions only, as a GPU does
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32 if recipe.use_cpu else torch.bfloat16)
    args = GRPOConfig(**{**plan.config, **sync_fields(recipe), **(config or {})})
    check_sampling(
        {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}, RECIPE_SAMPLING.as_request()
    )
    engine = InProcessEngine(
        model,
        tokenizer,
        served_model_name=plan.served,
        sampling=RECIPE_SAMPLING,
        policy=policy,
        dtype=recipe.engine_dtype,
    ).start()
    runtimes: dict[str, Any] = {}
    try:
        conditions = dict(model=plan.served, steps=recipe.agent_steps, max_output_tokens=recipe.max_output_tokens)
        for name in plan.harnesses:
            runtimes[name] = BlackBoxRuntime(
                plan.suite,
                engine.url,
                model=plan.served,
                opencode=OpencodeConfig(**conditions),
                pi=PiConfig(**conditions),
                harness=name,
                backend=backend,
                sampling=RECIPE_SAMPLING,
                timeout_s=recipe.agent_timeout_s,
                fork_threshold_tokens=recipe.fork_threshold_tokens,
                sandbox_dir=sandbox_dir,
            ).start()
        rollouts = BlackBoxRollouts(
            runtimes,
            recipe.split,
            tokenizer,
            num_generations=recipe.num_generations,
            engine=engine,
            fork_threshold=recipe.fork_threshold_tokens,
            receipts=plan.out / "receipts.jsonl",
            seed=recipe.seed,
        )
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        trainer = controlled(GRPOTrainer, plan.control, recipe.seed)(
            model=model,
            processing_class=tokenizer,
            reward_funcs=[env_reward],
            args=args,
            train_dataset=Dataset.from_list(list(plan.rows)),
            rollout_func=rollouts,
            callbacks=calls.listed(),
        )
        calls.health.trainer = trainer
        share_prompts(trainer)  # a group's prompt computed once in the forward and backward
    except BaseException:
        for runtime in runtimes.values():
            runtime.stop()
        engine.stop()
        raise
    return BlackboxRun(trainer, rollouts, engine, runtimes, calls, list(plan.checks), len(plan.rows))


# Options the sync path does not honour (F59: refused, never dropped; dagent.train.options).
SYNC_REFUSED = (
    Refusal("dry_run", "it checks the async launch's config and engine command", "drop it, or use --mode async"),
    Refusal(
        "env_url",
        "the sync trainer serves the policy itself and starts its own black-box runtime",
        "drop it, or use --mode async against a running server",
    ),
    Refusal(
        "engine_url",
        "the sync trainer's engine is the trainer's own model, served in-process",
        "drop it, or use --mode async",
    ),
    Refusal(
        "engine_devices",
        "the sync trainer's engine is the trainer's own model, served in-process",
        "drop it, or use --mode async on GPUs",
    ),
    ONE_PROCESS,
)


def train_blackbox(args: BlackboxArgs, echo: Any = print) -> Any:
    """Plan the run once from its arguments (`plan_run`: refusals, recipe, rows, preflight, config,
    callbacks), build the mode's trainer from the plan, train, save `final/`; every server and
    process the run started stops on any exit. An async dry run returns its checked config."""
    if args.processes > 1:
        raise ConfigError(
            f"--processes {args.processes}: black-box training runs ONE trainer process (sync serves "
            "the policy from it; async gives the engine the GPUs --engine-devices names and the "
            "trainer the one left): leave --processes at 0, or train white-box on several processes"
        )
    plan = plan_run(args, ASYNC_REFUSED if args.mode == "async" else SYNC_REFUSED)
    for check in plan.checks:
        echo(f"preflight {check.name}: {check.detail}")
    if plan.mode == "async":
        run = launch_async(plan, echo=echo)
        if not isinstance(run, Launched):  # a dry run: the checked config, nothing started
            return run
    else:
        run = build_sync(plan)
        echo(
            f"training {plan.model} (black-box, sync) on {plan.recipe.split} ({run.rows} rows), "
            f"{plan.recipe.max_steps} steps, G={plan.recipe.num_generations}, harnesses "
            f"{', '.join(plan.harnesses)}, engine {run.engine.url}"
        )
    assert plan.callbacks is not None  # planned without --dry-run
    train_and_save(run.trainer, plan.callbacks, plan.out, resume_from=plan.resume_from, echo=echo, close=run.stop)
    return run
