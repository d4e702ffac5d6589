"""The white-box recipe: the GRPO settings of `dagent train whitebox`, and the episode conditions
evaluation runs a checkpoint under (tool surface, step budget, output clip, completion budget).

One source for every setting that must agree between training and evaluation: the episode
(`EpisodeConfig`), the loop limits (`dagent.harness.toolloop.LoopLimits`) and sampling
(`dagent.core.sampling.RECIPE_SAMPLING`). `gpu()` is the published recipe; `cpu()` fits a 2-core
machine. Resolve one by name with `dagent.recipes.resolve("whitebox", preset, **overrides)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dagent.core.conditions import Conditions
from dagent.core.sampling import RECIPE_SAMPLING
from dagent.errors import ConfigError
from dagent.harness.toolloop import LoopLimits
from dagent.recipes.hardware import cpu_has_bf16
from dagent.tools import select
from dagent.tools.episode import EpisodeConfig

GENERATORS = ("transformers", "engine")


@dataclass(frozen=True)
class WhiteboxRecipe:
    """The GRPO settings. `gpu()` is the published recipe; `cpu()` fits this machine."""

    split: str = "train:easy"
    num_generations: int = 8
    beta: float = 0.04
    learning_rate: float = 1e-6
    warmup_steps: int = 10
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 4
    max_completion_length: int = 3072  # counts tool-result tokens (TRL's meaning)
    max_tool_calling_iterations: int | None = None  # the agent-side step cap; None: the env's budget rules
    output_chars: int = 1200
    tools: str = "all"  # the toolset the episodes serve (dagent.tools.select): the prompt's tool schemas
    max_steps: int = 200
    save_steps: int = 20
    use_vllm: bool = True
    vllm_gpu_memory_utilization: float = 0.3
    vllm_server_url: str | None = None  # a `trl vllm-serve` engine on its own GPUs; None: colocated
    vllm_group_port: int = 51216  # the weight-sync group's port (TRL's default; a Slurm job derives its own, F36)
    use_cpu: bool = False
    bf16: bool = True
    generation_dtype: str = (
        "auto"  # CPU: "auto" generates in bfloat16 where bf16 is on (dagent.train.whitebox.cpu_generation); "float32"
    )
    gradient_checkpointing: bool = True  # TRL's default: recompute activations in the backward pass (memory for time)
    # without vLLM: "transformers" (TRL's generate) or "engine" (dagent.train.whitebox.engine_generation)
    generator: str = "transformers"
    seed: int = 0
    logging_steps: int = 1

    def __post_init__(self) -> None:
        if self.generation_dtype not in ("auto", "float32"):
            raise ConfigError(
                f"generation_dtype {self.generation_dtype!r}: use auto (bfloat16 on a CPU that computes it "
                "natively, when bf16 is on) or float32"
            )
        if self.generator not in GENERATORS:
            raise ConfigError(
                f"generator {self.generator!r}: use {' or '.join(GENERATORS)} (where vLLM is off; "
                "vLLM generates where use_vllm is on)"
            )

    @classmethod
    def gpu(cls, **overrides: Any) -> WhiteboxRecipe:
        return replace(cls(), **overrides)

    @classmethod
    def cpu(cls, **overrides: Any) -> WhiteboxRecipe:
        """CPU generation, short completions, small groups, bf16 only with AMX, and the bash toolset
        only (its prompt is a third of bash + SETA's file tools: 436 tokens against 1,285 with
        SmolLM2's template, and every forward pass of a step reads the prompt). Each CPU kind
        generates the way measured fastest on it (benchmarks/train.py): with native bfloat16, TRL's
        generation in a bfloat16 autocast (dagent.train.whitebox.cpu_generation); without it, float32 through
        dagent's engine (dagent.train.whitebox.engine_generation: continuous batching, prefix reuse)."""
        native = cpu_has_bf16()
        base = cls(
            num_generations=4,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=1,
            max_completion_length=640,
            output_chars=600,
            max_tool_calling_iterations=4,
            tools="bash",
            learning_rate=5e-6,
            warmup_steps=2,
            max_steps=40,
            save_steps=10,
            use_vllm=False,
            use_cpu=True,
            bf16=native,
            generator="transformers" if native else "engine",
        )
        return replace(base, **overrides)

    @property
    def episode(self) -> EpisodeConfig:
        return EpisodeConfig(tools=select(self.tools), output_chars=self.output_chars)

    @property
    def limits(self) -> LoopLimits:
        """TRL generates each turn up to what is left of the completion budget: so does the loop
        evaluation runs (no per-turn cap of its own)."""
        return LoopLimits(
            max_completion_length=self.max_completion_length,
            max_tool_calling_iterations=self.max_tool_calling_iterations,
            max_tokens_per_turn=self.max_completion_length,
        )

    @property
    def conditions(self) -> Conditions:
        """The white-box episode's conditions (dagent.core.conditions), as training runs it."""
        return Conditions.of(
            "white-box",
            RECIPE_SAMPLING,
            tokens_per_call=self.max_completion_length,
            tokens_per_episode=self.max_completion_length,
            step_cap=self.max_tool_calling_iterations or self.episode.max_steps,
            output_chars=self.output_chars,
            timeout_s=None,
        )

    def with_groups_per_step(self, groups: int) -> WhiteboxRecipe:
        """`groups` GRPO groups of G rollouts an optimizer step: TRL's generation batch is per device x
        accumulation = groups x G, so the per-device batch is what changes."""
        rollouts = groups * self.num_generations
        if groups < 1 or rollouts % self.gradient_accumulation_steps:
            raise ConfigError(
                f"--groups-per-step {groups}: {rollouts} rollouts a step do not split "
                f"into the preset's {self.gradient_accumulation_steps} accumulation steps"
            )
        return replace(self, per_device_train_batch_size=rollouts // self.gradient_accumulation_steps)
