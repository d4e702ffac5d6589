"""White-box GRPO: TRL's `GRPOTrainer(environment_factory=...)` against the white-box environment,
in process or through a running server (`env_url`), with the recipe `dagent.recipes` resolves (the
published one as the GPU default, a `cpu` preset sized for a 2-core machine). `preflight` refuses what would train
silently on nothing
(dagent.train.preflight); `HealthWatch` stops a run that stopped learning (dagent.train.health).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite
from dagent.engine.models import model_dir
from dagent.envs.contract import trainer_rows
from dagent.envs.whitebox_client import white_box_client
from dagent.harness.contract import check_step_cap
from dagent.harness.toolloop import tool_schemas
from dagent.launch.processes import relaunch
from dagent.recipes import WhiteboxRecipe, resolve
from dagent.suites.sources import load_tasks
from dagent.tools.episode import close_all
from dagent.train.args import TrainArgs
from dagent.train.assembly import Callbacks, callbacks, config_kwargs, run_dir, train_and_save, training_rows
from dagent.train.preflight import (
    Check,
    TaskRates,
    check_completion_length,
    check_group_size,
    check_split,
    check_template,
    check_venv_on_path,
)
from dagent.train.scoring import score_completions_only
from dagent.train.whitebox.cpu_generation import generate_in_bf16
from dagent.train.whitebox.engine_generation import generate_through_engine


def grpo_config(
    recipe: WhiteboxRecipe,
    output_dir: str | Path,
    *,
    report_to: str = "none",
    run_name: str | None = None,
    project: str = "dagent",
    **extra: Any,
) -> Any:
    """TRL's GRPOConfig for `recipe`: the fields every path sets alike (`dagent.train.assembly`,
    sampling from RECIPE_SAMPLING, F05), then the white-box loop's own. Checkpoints reach the Hub
    through `dagent.train.hub_checkpoints.CheckpointPusher`, not the Trainer's own push (which keeps
    only `last-checkpoint/`)."""
    from trl import GRPOConfig

    kwargs = config_kwargs(recipe, output_dir, report_to=report_to, run_name=run_name, project=project)
    kwargs.update(
        per_device_train_batch_size=recipe.per_device_train_batch_size,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        beta=recipe.beta,
        max_completion_length=recipe.max_completion_length,
        max_tool_calling_iterations=recipe.max_tool_calling_iterations,
        logging_steps=recipe.logging_steps,
        use_cpu=recipe.use_cpu,
        bf16=recipe.bf16,
        use_vllm=recipe.use_vllm,
        gradient_checkpointing=recipe.gradient_checkpointing,
    )
    if recipe.use_vllm and recipe.vllm_server_url:
        kwargs.update(
            vllm_mode="server", vllm_server_base_url=recipe.vllm_server_url, vllm_group_port=recipe.vllm_group_port
        )
    elif recipe.use_vllm:
        kwargs.update(vllm_mode="colocate", vllm_gpu_memory_utilization=recipe.vllm_gpu_memory_utilization)
    kwargs.update(extra)
    return GRPOConfig(**kwargs)


def preflight(
    recipe: WhiteboxRecipe,
    tokenizer: Any,
    n_tasks: int,
    *,
    base_pass1: float | None = None,
    force: bool = False,
    gpu: bool = False,
    rates: TaskRates | None = None,
) -> list[Check]:
    """Every check of dagent.train.preflight that applies, in order; raises on the first failure."""
    episode = recipe.episode
    checks = [
        check_split(n_tasks, recipe.split),
        check_step_cap(recipe.max_tool_calling_iterations, episode.max_steps),
        check_completion_length(recipe.max_completion_length, episode.output_chars),
        check_group_size(recipe.num_generations, base_pass1, rates=rates, force=force),
        check_template(tokenizer, tool_schemas(episode.tools)),
    ]
    if gpu:
        checks.append(check_venv_on_path())
    return checks


@dataclass
class TrainRun:
    """What `build_trainer` made: the trainer, the health watch, the preflight's verdicts and the
    step timer (each step's seconds by phase)."""

    trainer: Any
    callbacks: Callbacks
    checks: list[Check] = field(default_factory=list)
    rows: int = 0

    @property
    def health(self) -> Any:
        return self.callbacks.health

    @property
    def timer(self) -> Any:
        return self.callbacks.timer

    @property
    def budget(self) -> Any:
        return self.callbacks.budget


def build_trainer(
    model_dir: str | Path,
    suite: TaskSuite,
    recipe: WhiteboxRecipe,
    output_dir: str | Path,
    *,
    env_url: str | None = None,
    backend: Any = None,
    curriculum: str | None = None,
    base_pass1: float | None = None,
    force: bool = False,
    report_to: str = "none",
    push_to_hub: str | None = None,
    run_name: str | None = None,
    max_minutes: float | None = None,
    hub_api: Any = None,
    control: str = "none",
    rates: TaskRates | None = None,
    mixed_only: bool = False,
    peft_config: Any = None,
    **config: Any,
) -> TrainRun:
    """The GRPO trainer over the suite's `recipe.split` rows (curriculum `warmup:N` optional),
    after the preflight. `env_url` trains against a running white-box server (the HTTP client).
    `peft_config` is TRL's (adapters only in each checkpoint): `benchmarks/train.py --lora` measured
    LoRA SLOWER on a CPU for SmolLM2-135M (unmerged adapters cost every generated token more than
    the frozen weights save in the backward pass), so no preset uses it."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from dagent.envs.whitebox_runtime import white_box_env
    from dagent.train.control import controlled
    from dagent.train.timing import StepTimer

    score_completions_only()  # a CPU scores the completion's positions only, as a GPU does
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rows, rates = training_rows(
        trainer_rows(
            suite.prompt_rows(recipe.split, curriculum=curriculum) if curriculum else suite.prompt_rows(recipe.split)
        ),
        rates,
        mixed_only=mixed_only,
    )
    checks = preflight(
        recipe, tokenizer, len(rows), base_pass1=base_pass1, force=force, gpu=torch.cuda.is_available(), rates=rates
    )
    timer = StepTimer()
    if env_url:
        env = white_box_client(env_url, recipe.tools)
    else:
        env = white_box_env(suite, recipe.tools, backend=backend, config=recipe.episode, clock=timer.clock)
    dtype = torch.bfloat16 if recipe.bf16 and not recipe.use_cpu else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)
    args = grpo_config(recipe, output_dir, report_to=report_to, run_name=run_name, **config)
    calls = callbacks(
        suite,
        model_dir,
        recipe_summary(recipe),
        control=control,
        push_to_hub=push_to_hub,
        max_minutes=max_minutes,
        timer=timer,
        hub_api=hub_api,
    )
    peft = {"peft_config": peft_config} if peft_config is not None else {}
    trainer = controlled(GRPOTrainer, control, recipe.seed)(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[],
        args=args,
        train_dataset=Dataset.from_list(rows),
        environment_factory=env,
        callbacks=calls.listed(),
        **peft,
    )
    calls.health.trainer = trainer
    if not recipe.use_vllm and recipe.generator == "engine":
        generate_through_engine(trainer)  # in the module's own dtype (float32 on a CPU)
    elif recipe.use_cpu and recipe.bf16 and recipe.generation_dtype == "auto":
        generate_in_bf16(trainer)  # before the timer wraps it: the timer times what runs
    timer.attach(trainer)
    return TrainRun(trainer, calls, checks, len(rows))


def recipe_summary(recipe: WhiteboxRecipe) -> dict[str, Any]:
    return {**asdict(recipe), "sampling": RECIPE_SAMPLING.as_request()}


@dataclass
class WhiteboxArgs(TrainArgs):
    """`jobs/train_whitebox.py` and `dagent train whitebox` (one definition)."""

    curriculum: str | None = field(
        default=None, metadata={"help": "warmup:N: N easy tasks, then medium with hard spread through."}
    )
    env_url: str | None = field(
        default=None, metadata={"help": "Train against a running white-box server or Space (default: in process)."}
    )
    tools: str | None = field(
        default=None,
        metadata={
            "help": (
                "Toolset the episodes serve: all (bash + SETA's file tools) or bash (default: the preset's; gpu all, "
                "cpu bash)."
            )
        },
    )
    max_completion_length: int | None = field(
        default=None, metadata={"help": "Completion budget, tool-result tokens included."}
    )
    out: str = field(default="runs/grpo", metadata={"help": "Output directory (checkpoint-N/, final/)."})
    vllm_server_url: str | None = field(
        default=None,
        metadata={
            "help": "A `trl vllm-serve` engine on other GPUs (http://host:port); default: vLLM colocated (gpu preset)."
        },
    )
    vllm_group_port: int | None = field(
        default=None, metadata={"help": "Port of the trainer-engine weight-sync group (with --vllm-server-url)."}
    )

    def recipe(self) -> WhiteboxRecipe:
        given = self.overrides(
            tools=self.tools,
            max_completion_length=self.max_completion_length,
            vllm_server_url=self.vllm_server_url,
            vllm_group_port=self.vllm_group_port,
            groups_per_step=self.groups_per_step,
        )
        return resolve("whitebox", self.preset, **given)


def train_whitebox(args: WhiteboxArgs, echo: Any = print) -> TrainRun:
    """Preflight, train, save `final/`; every sandbox the run opened is closed on any exit."""
    out = run_dir(args)
    recipe = args.recipe()
    # on a multi-GPU machine (an HF Jobs flavour like a100x4) this process becomes N trainer processes
    relaunch(args.processes, args.accelerate_config, mixed_precision="bf16" if recipe.bf16 else "no", echo=echo)
    suite = load_tasks(args.suite)
    path = model_dir(args.model)
    run = build_trainer(
        path,
        suite,
        recipe,
        out,
        env_url=args.env_url,
        curriculum=args.curriculum,
        base_pass1=args.base_pass1,
        force=args.force,
        report_to=args.report_to,
        push_to_hub=args.push_to_hub,
        run_name=args.run_name,
        max_minutes=args.max_minutes,
        control=args.control,
        rates=args.rates(),
        mixed_only=args.mixed_only,
        **args.trackio(),
    )
    for check in run.checks:
        echo(f"preflight {check.name}: {check.detail}")
    echo(
        f"training {path} on {recipe.split} ({run.rows} rows), {recipe.max_steps} steps, G={recipe.num_generations}, "
        f"lr {recipe.learning_rate:g}, sampling {RECIPE_SAMPLING.as_request()}"
    )
    train_and_save(run.trainer, run.callbacks, out, resume_from=args.resume_from, echo=echo, close=close_all)
    return run
