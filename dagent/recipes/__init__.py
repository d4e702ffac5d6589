"""The training recipes: every setting a run trains with, and the episode conditions evaluation runs a
checkpoint under, so the two always agree (F47). Training and evaluation both stand on this layer;
neither imports the other for it.

    resolve("whitebox", "cpu", max_steps=8)      a WhiteboxRecipe (`dagent train whitebox`)
    resolve("blackbox", "gpu")                   a BlackboxRecipe (`dagent train blackbox`)
    Recipes.of("cpu").conditions("pi")           both loops' recipes of one preset, for an evaluation

A command resolves its preset once where it starts and passes the object down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagent.core.conditions import Conditions
from dagent.errors import ConfigError
from dagent.recipes.blackbox import HARNESSES, BlackboxRecipe
from dagent.recipes.hardware import cpu_has_bf16
from dagent.recipes.whitebox import WhiteboxRecipe

KINDS = ("whitebox", "blackbox")
PRESETS: dict[str, dict[str, Callable[..., Any]]] = {
    "whitebox": {"gpu": WhiteboxRecipe.gpu, "cpu": WhiteboxRecipe.cpu},
    "blackbox": {"gpu": BlackboxRecipe.gpu, "gpu-steps25": BlackboxRecipe.gpu_steps25, "cpu": BlackboxRecipe.cpu},
}
AGENT_KIND = {"tools": "whitebox", "opencode": "blackbox", "pi": "blackbox"}  # the oracle runs no recipe

__all__ = [
    "AGENT_KIND",
    "HARNESSES",
    "KINDS",
    "PRESETS",
    "BlackboxRecipe",
    "Recipes",
    "WhiteboxRecipe",
    "cpu_has_bf16",
    "preset_of",
    "resolve",
]


def resolve(kind: str, preset: str, **overrides: Any) -> Any:
    """The `kind` loop's recipe that `preset` names, with `overrides` (recipe fields; None keeps the
    preset's). `groups_per_step` is a field of the black-box recipe; on the white-box one it sets
    TRL's per-device batch to that many groups of G."""
    if kind not in PRESETS:
        raise ConfigError(f"unknown recipe kind {kind!r}: use {' or '.join(KINDS)}")
    if preset not in PRESETS[kind]:
        raise ConfigError(
            f"unknown preset {preset!r} for {kind}: use {', '.join(PRESETS[kind])} "
            "(the recipe the checkpoint trained under)"
        )
    given = {k: v for k, v in overrides.items() if v is not None}
    groups = given.pop("groups_per_step", None) if kind == "whitebox" else None
    recipe = PRESETS[kind][preset](**given)
    return recipe.with_groups_per_step(groups) if groups is not None else recipe


@dataclass(frozen=True)
class Recipes:
    """One preset's recipes for both loops, resolved once (`Recipes.of`) where a command starts: an
    evaluation's arms may run either loop, each under the conditions its checkpoint trained in. A loop
    the preset does not name is None, and asking for it names the presets that loop has."""

    preset: str
    whitebox: WhiteboxRecipe | None
    blackbox: BlackboxRecipe | None

    @classmethod
    def of(cls, preset: str) -> Recipes:
        found = {kind: resolve(kind, preset) for kind in KINDS if preset in PRESETS[kind]}
        if not found:
            names = sorted({name for presets in PRESETS.values() for name in presets})
            raise ConfigError(f"unknown preset {preset!r}: use {', '.join(names)}")
        return cls(preset, found.get("whitebox"), found.get("blackbox"))

    def for_agent(self, agent: str) -> Any:
        """The recipe `agent` runs under (None for the oracle, which has none)."""
        kind = AGENT_KIND.get(agent)
        if kind is None:
            return None
        recipe = getattr(self, kind)
        if recipe is None:
            raise ConfigError(
                f"preset {self.preset!r} has no {kind} recipe, which agent {agent!r} runs under: "
                f"use {', '.join(PRESETS[kind])}"
            )
        return recipe

    def conditions(self, agent: str) -> Conditions | None:
        """The episode conditions `agent` runs under (None: the oracle has none)."""
        recipe = self.for_agent(agent)
        return None if recipe is None else recipe.conditions

    def step_cap(self, agent: str) -> int | None:
        """The tool calls (white-box) or turns (black-box) an episode of `agent` can reach."""
        conditions = self.conditions(agent)
        return None if conditions is None else conditions.step_cap


def preset_of(recipe: dict[str, Any]) -> str | None:
    """The preset a run trained under, from its provenance's recipe record (`asdict` of its recipe,
    `mode` naming a black-box run): the one preset of that loop whose episode conditions (F47) and
    device (`use_cpu`) equal the record's; None where none or several do (a run that overrode them)."""
    kind = "blackbox" if "black-box" in str(recipe.get("mode", "")) else "whitebox"
    names = {f.name for f in dataclasses.fields(BlackboxRecipe if kind == "blackbox" else WhiteboxRecipe)}
    try:
        made = (BlackboxRecipe if kind == "blackbox" else WhiteboxRecipe)(
            **{k: v for k, v in recipe.items() if k in names}
        )
        conditions = made.conditions
    except (TypeError, ValueError, ConfigError):
        return None
    presets = {name: build() for name, build in PRESETS[kind].items()}
    found = [name for name, r in presets.items() if r.conditions == conditions and r.use_cpu == made.use_cpu]
    return found[0] if len(found) == 1 else None
