"""What one evaluation runs and reports, as one frozen record (`EvalArgs`, the counterpart of
`dagent.train.args.TrainArgs`): built once where a command starts, its preset resolved there into
`Recipes`, and carried down `run_experiment` -> `evaluate_arms` -> `agent_stack` instead of long
keyword lists, so an option added here reaches every level without a signature changing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dagent.core.reward import RewardConfig
from dagent.errors import ConfigError
from dagent.provenance import checkpoint_record
from dagent.recipes import Recipes, preset_of

DEFAULT_PRESET = "gpu"


def preset_for(given: str | None, *models: str | None) -> tuple[str, str]:
    """The preset an evaluation runs under and why: `given` (--preset) when set; else the one the
    checkpoints' provenance names (each local model dir's `provenance.json`: the conditions it trained
    under, so train-then-eval measures it as it trained, F47); else the default."""
    if given:
        return given, "given (--preset)"
    found = {}
    for model in models:
        record = checkpoint_record(model) if model else None
        preset = preset_of(record.get("recipe") or {}) if record else None
        if preset:
            found[model] = preset
    if len(set(found.values())) == 1:
        preset = next(iter(found.values()))
        return (
            preset,
            f"from {', '.join(map(str, found))}'s provenance.json (the recipe it trained under); --preset overrides",
        )
    if found:
        raise ConfigError(
            f"the checkpoints trained under different presets ({found}): evaluate them apart, or "
            "pass --preset to run every arm under one"
        )
    return DEFAULT_PRESET, "the default (no checkpoint's provenance names one); --preset sets it"


@dataclass(frozen=True)
class EvalArgs:
    """The tasks (split, limit, task_seed, samples), how episodes run (workers, timeout, sandbox
    backend, the recipes whose conditions each agent runs under, a remote white-box server, the
    reward), and what is reported (baseline arm, pass@k, the baseline guard, trackio, the Hub)."""

    split: str = "test"
    samples: int = 1
    limit: int | None = None
    task_seed: int | None = None  # with limit: a seeded sample of the split instead of its first tasks
    workers: int = 2
    timeout_s: float = 300.0
    backend: str = "local"
    recipes: Recipes = field(default_factory=lambda: Recipes.of("gpu"))
    env_url: str | None = None  # episodes on a running white-box server (tools agents only)
    reward_config: RewardConfig = field(default_factory=RewardConfig)
    baseline: str | None = None  # the arm every other is compared with, task by task
    k_values: tuple[int, ...] = (1,)
    expect_base: float | None = None  # the baseline's known pass@1 (F41)
    tolerance: float = 0.05
    trackio_project: str | None = None
    trackio_space: str | None = None
    push_to: str | None = None  # a Hub model repo for the results

    @classmethod
    def of(cls, *, preset: str = "gpu", k_values: Any = (1,), **given: Any) -> EvalArgs:
        """From a command's options: `preset` resolved into `Recipes` here, once."""
        return cls(recipes=Recipes.of(preset), k_values=tuple(k_values), **given)
