"""Black-box GRPO on GPUs: TRL's `AsyncGRPOTrainer` + `HarnessRolloutWorker` + our session factory.

The job starts everything it needs and stops it on any exit: vLLM on its own GPU(s) (dev mode,
NCCL weight transfer, processed logprobs, FlashInfer's sampler off), the black-box environment
server with its capture proxy (or a running server / duplicated Space by `--env-url`), and the
trainer on the remaining GPUs. Ports derive from the job id (F36, `dagent.launch.ports`).

Every knob that a default gets wrong for agent rollouts is set here and CHECKED before anything
starts (`check_config`, F38), each refusal naming the measured reason (seed history):
- `token_budget` left at None tracks the engine's max_model_len (131,072 there): a trained row
  three times the measured rows, out of memory before step 1. Pinned (40,960 over rows measured
  up to 40,870).
- `heartbeat_stale_after_s` (300 by default) below the agent's own timeout (600): a worker busy
  with full in-flight slots does not tick and is killed as hung. 900.
- `max_completion_length` (2,048) below what capture clamps an agent's max_tokens to (8,192):
  the rollout side would ask for more than the trainer accepts. 16,384.
- `max_inflight_tasks` sized by client count rather than turn-slots (concurrent rollouts x turns
  per rollout): 64 clients of 16-turn rollouts (~1,024 turn-slots) collapsed an evaluation with
  keep-alive timeouts where 32 x 8.5 (~272) held.
- the trainer's dtype must be the engine's (F06): a precision gap biases the importance ratio.

Before training, the engine is probed and a remote environment server asked to reach it from its own
host (`dagent.train.blackbox.async_engine`: dev mode, weight transfer, processed logprobs, identity, dtype).

AsyncGRPOTrainer cannot run on a CPU (its tree attention loads a FlashAttention-3 CUDA kernel);
on this machine the config is built and asserted field by field and the preflights run against
planted engines (tests/train/test_blackbox_async.py); the launch itself is not exercised here.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.envs.blackbox_server import create_app
from dagent.errors import ConfigError
from dagent.harness.opencode import OpencodeConfig
from dagent.harness.pi import PiConfig
from dagent.launch.ports import job_ports
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.serving import ThreadedServer, stop_process
from dagent.train import assembly
from dagent.train.blackbox.args import ONE_PROCESS
from dagent.train.blackbox.async_engine import (
    ENGINE_ENV,
    check_dtype,
    engine_command,
    start_engine,
)
from dagent.train.blackbox.plan import BlackboxPlan
from dagent.train.blackbox.rollouts import env_reward
from dagent.train.options import Refusal
from dagent.train.preflight import Check, PreflightError
from dagent.train.routing import route

#: The reference run's values (module docstring; each checked by `check_config`).
TOKEN_BUDGET = 40_960
HEARTBEAT_S = 900.0
MAX_COMPLETION = 16_384
TURN_SLOTS = 272  # concurrent rollouts x turns per rollout that one environment server held


def async_fields(recipe: Any, *, engine_url: str, turns_per_rollout: float = 8.5) -> dict[str, Any]:
    """AsyncGRPOConfig's own fields for `recipe` (a BlackboxRecipe), after those every path sets
    alike: the reference's knobs pinned (module docstring)."""
    inflight = max(recipe.num_generations, int(TURN_SLOTS // turns_per_rollout))
    return dict(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=max(1, recipe.batch // 4),
        save_total_limit=3,
        logging_steps=1,
        dtype="bfloat16",
        vllm_server_base_url=engine_url,
        token_budget=TOKEN_BUDGET,
        heartbeat_stale_after_s=HEARTBEAT_S,
        max_completion_length=MAX_COMPLETION,
        max_inflight_tasks=inflight,
        fork_threshold_tokens=recipe.worker_fork_threshold,
        max_tool_calling_iterations=recipe.agent_steps,
    )


def config_kwargs(
    recipe: Any,
    output_dir: str,
    *,
    engine_url: str,
    turns_per_rollout: float = 8.5,
    run_name: str | None = None,
    report_to: str = "none",
    **extra: Any,
) -> dict[str, Any]:
    """AsyncGRPOConfig's arguments for `recipe` (a BlackboxRecipe): the fields every path sets alike
    (`dagent.train.assembly`), then this path's own (`async_fields`), then `extra`."""
    common = assembly.config_kwargs(recipe, output_dir, report_to=report_to, run_name=run_name)
    return {**common, **async_fields(recipe, engine_url=engine_url, turns_per_rollout=turns_per_rollout), **extra}


def check_config(
    kwargs: dict[str, Any],
    *,
    agent_timeout_s: float,
    capture_clamp: int,
    engine_max_model_len: int,
    turns_per_rollout: float,
    engine_dtype: str | None = None,
) -> list[Check]:
    """F38 (and F06 when the engine's dtype is known): refuse knobs that do not fit agent rollouts."""
    budget = kwargs.get("token_budget")
    if budget is None or budget >= engine_max_model_len:
        raise PreflightError(
            f"token_budget_at_max_model_len: token_budget {budget} tracks the engine's max_model_len "
            f"({engine_max_model_len}); a trained row that long ran out of memory before step 1 (measured): pin it "
            f"to the longest rows you measured plus a margin (the reference: {TOKEN_BUDGET}) (F38)"
        )
    heartbeat = float(kwargs.get("heartbeat_stale_after_s", 300.0))
    if heartbeat <= agent_timeout_s:
        raise PreflightError(
            f"heartbeat_below_agent_timeout: heartbeat_stale_after_s {heartbeat:g} <= the agent timeout "
            f"{agent_timeout_s:g} s: a worker whose in-flight slots are all busy with long rollouts stops ticking "
            f"and is killed as hung (measured: 'heartbeat stale: 302s > 300s'); set it above the agent timeout, "
            f"e.g. {HEARTBEAT_S:g} (F38)"
        )
    completion = int(kwargs.get("max_completion_length", 2048))
    if completion < capture_clamp:
        raise PreflightError(
            f"completion_below_clamp: max_completion_length {completion} is below what capture lets an agent ask "
            f"for ({capture_clamp} tokens): raise it to at least {capture_clamp} (the reference: {MAX_COMPLETION}) "
            "(F38)"
        )
    inflight = int(kwargs.get("max_inflight_tasks", -1))
    slots = inflight * turns_per_rollout
    if inflight < 1 or slots > TURN_SLOTS * 1.5:
        raise PreflightError(
            f"inflight_by_clients: max_inflight_tasks {inflight} x {turns_per_rollout:g} turns per rollout = "
            f"{slots:.0f} concurrent turn-slots on one environment server; size it by turn-slots, not clients "
            f"(~{TURN_SLOTS} held; 64 x 16 = 1,024 collapsed an evaluation with keep-alive timeouts) (F38)"
        )
    checks = [
        Check("token_budget", True, f"{budget} < engine max_model_len {engine_max_model_len}"),
        Check("heartbeat", True, f"{heartbeat:g} s > agent timeout {agent_timeout_s:g} s"),
        Check("completion", True, f"{completion} >= capture clamp {capture_clamp}"),
        Check("inflight", True, f"{inflight} rollouts x {turns_per_rollout:g} turns = {slots:.0f} turn-slots"),
    ]
    if engine_dtype is not None:
        checks.append(check_dtype(str(kwargs.get("dtype")), engine_dtype))
    return checks


def worker_kwargs(
    config: Any, model: str, dataset: Any, tokenizer: Any, factory: Any, *, lossless_capture: bool = True
) -> dict[str, Any]:
    """`HarnessRolloutWorker`'s arguments, as AsyncGRPOTrainer builds its own worker's from `config`,
    plus our session factory and the recipe's fork policy (`lossless_capture`: TRL's default True
    would force `fork_threshold_tokens` to 0 whatever the config says, F46). Everything here is
    pickled into TRL's SPAWNED child, so the factory and the reward function must import by name
    there (tests/train/test_blackbox_async.py spawns one)."""
    eos = tokenizer.eos_token_id
    return dict(
        model_name=model,
        dataset=dataset,
        reward_funcs=[env_reward],
        processing_class=tokenizer,
        eos_token_ids=[eos] if isinstance(eos, int) else list(eos or []),
        harness_session_factory=factory,
        num_generations=config.num_generations,
        max_inflight_tasks=config.max_inflight_tasks,
        queue_maxsize=config.queue_maxsize,
        vllm_server_url=config.vllm_server_base_url,
        max_tokens=config.max_completion_length,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
        request_timeout=config.request_timeout,
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        fork_threshold_tokens=config.fork_threshold_tokens,
        lossless_capture=lossless_capture,
    )


class RoutedSessions:
    """The worker's session factory over one black-box server per harness: every rollout of a GRPO
    group goes to the harness its group id routes to (`dagent.train.routing.route`, F40), so the
    advantage never encodes which harness ran. Built in TRL's spawned child from a picklable
    `functools.partial(RoutedSessions, servers, split=..., timeout_s=...)`."""

    def __init__(
        self,
        servers: dict[str, str],
        *,
        split: str = "train",
        sampling: dict[str, Any] | None = None,
        timeout_s: float = 900.0,
    ) -> None:
        from dagent.envs.blackbox_session import BlackBoxSessionFactory  # openenv: only in the worker's child

        if not servers:
            raise ConfigError("no black-box server to send rollouts to: start one per harness")
        self.names = tuple(servers)
        self.factories = {
            name: BlackBoxSessionFactory(url, split=split, sampling=sampling, timeout_s=timeout_s)
            for name, url in servers.items()
        }

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Any:
        return self.factories[route(seed or 0, self.names)].create(task, seed=seed, episode_id=episode_id)


# -- the job ---------------------------------------------------------------------------------------
@dataclass
class Processes:
    """Everything the job started; `stop()` on any exit (a survivor holds the port for the next job)."""

    procs: list[subprocess.Popen]
    stoppers: list[Any]

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            try:
                stop()
            except Exception:  # noqa: BLE001 - keep stopping the rest
                pass
        for p in self.procs:
            stop_process(p)


# Options the async path does not honour (F59: refused, never dropped; dagent.train.options).
ASYNC_REFUSED = (
    Refusal(
        "control",
        "AsyncGRPOTrainer scores rewards inside its rollout worker, where the permuted control's "
        "wrapper of GRPOTrainer._calculate_rewards never runs: the run would train as ordinary GRPO under a "
        "control's name",
        "run the control with --mode sync (the same code path as its GRPO arm)",
    ),
    Refusal(
        "generation_dtype",
        "the async engine is vLLM on its own GPU, serving in the dtype its command names",
        "drop it (it sets the sync trainer's in-process engine on a CPU)",
    ),
    ONE_PROCESS,
)


@dataclass
class Launched:
    """The async run as started: its trainer and everything to stop on any exit."""

    trainer: Any
    processes: Processes

    def stop(self) -> None:
        self.processes.stop()


def launch_async(plan: BlackboxPlan, echo: Any = print) -> Any:
    """The GPU launcher (module docstring), from a plan (`dagent.train.blackbox.plan.plan_run`, which
    refused what this path cannot honour, `ASYNC_REFUSED`, F59). A dry run prints the engine command
    and the checked config and returns the config, starting nothing; otherwise it starts the engine
    and the environment servers and returns the trainer (`Launched`), for the caller to train."""
    recipe, launch = plan.recipe, plan.launch
    ports = job_ports()
    kwargs = {
        **plan.config,
        **async_fields(recipe, engine_url=f"http://127.0.0.1:{ports.engine}", turns_per_rollout=8.5),
    }
    checks = check_config(
        kwargs,
        agent_timeout_s=recipe.agent_timeout_s,
        capture_clamp=recipe.max_output_tokens,
        engine_max_model_len=65_536,
        turns_per_rollout=8.5,
    )
    # every engine device serves a replica (data parallel); the trainer takes the one GPU left (trainer_devices)
    command = engine_command(
        plan.served,
        ports.engine,
        served_name=plan.served,
        data_parallel_size=len([d for d in launch.engine_devices.split(",") if d.strip()]),
    )
    for check in checks:
        echo(f"preflight {check.name}: {check.detail}")
    echo(
        f"job {ports.job_id}: engine :{ports.engine}, weight group :{ports.group}, env :{ports.env}"
        f" ({', '.join(plan.harnesses)}, routed per group), fork policy: lossless_capture={recipe.lossless_capture},"
        f" fork_threshold_tokens={recipe.worker_fork_threshold}"
    )
    echo("engine: " + " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items()) + " " + " ".join(command))
    if launch.dry_run:
        return kwargs
    procs = Processes([], [])
    try:
        devices = start_engine(
            command,
            ports.engine,
            plan.served,
            procs.procs,
            engine_devices=launch.engine_devices,
            env_url=launch.env_url,
            engine_url=launch.engine_url,
            echo=echo,
        )
        return _launch(plan, kwargs, ports, devices, procs)
    except BaseException:
        procs.stop()
        raise


def _launch(
    plan: BlackboxPlan, kwargs: dict[str, Any], ports: Any, devices: list[str], procs: Processes
) -> Launched:  # pragma: no cover - needs GPUs and vLLM (module docstring)
    """The trainer over the started engine: the worker's arguments first (each harness's server at
    its port from the job's ports, or `--env-url`), then the servers, then TRL's worker and trainer."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker

    recipe, calls, path = plan.recipe, plan.callbacks, plan.path
    assert calls is not None and path is not None  # planned without --dry-run
    local = {} if plan.launch.env_url else {name: ports.env + i for i, name in enumerate(plan.harnesses)}
    servers = {name: f"http://127.0.0.1:{port}" for name, port in local.items()} or {
        plan.harnesses[0]: str(plan.launch.env_url)
    }
    factory = functools.partial(RoutedSessions, servers, split=recipe.split, timeout_s=recipe.agent_timeout_s + 60)
    config = AsyncGRPOConfig(**kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    rows = Dataset.from_list(list(plan.rows))
    worker = worker_kwargs(config, plan.served, rows, tokenizer, factory, lossless_capture=recipe.lossless_capture)
    engine_url = f"http://127.0.0.1:{ports.engine}"
    conditions = dict(model=plan.served, steps=recipe.agent_steps, max_output_tokens=recipe.max_output_tokens)
    for name, port in local.items():  # each harness's server, where the worker's factory looks for it
        runtime = BlackBoxRuntime(
            plan.suite,
            engine_url,
            model=plan.served,
            sampling=RECIPE_SAMPLING,
            timeout_s=recipe.agent_timeout_s,
            opencode=OpencodeConfig(**conditions),
            pi=PiConfig(**conditions),
            harness=name,
            fork_threshold_tokens=recipe.worker_fork_threshold,
        ).start()
        procs.stoppers.append(runtime.stop)
        server = ThreadedServer(create_app(runtime, max_concurrent=64), port=port, timeout_keep_alive=75).start()
        procs.stoppers.append(server.stop)
        if server.url != servers[name]:
            raise ConfigError(f"the {name} server serves at {server.url}, not {servers[name]}: rerun the job")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    trainer = AsyncGRPOTrainer(
        model=str(path),
        args=config,
        train_dataset=rows,
        reward_funcs=[env_reward],
        rollout_worker=HarnessRolloutWorker(**worker),
        callbacks=calls.listed(),
    )
    calls.health.trainer = trainer  # the health watch reads the trainer's logs
    return Launched(trainer, procs)
