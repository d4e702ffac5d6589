"""Every private TRL internal dagent reaches into, in one place, with the TRL release it was written for.

dagent trains with TRL's own trainers and changes their behaviour at a few private seams (a CPU
scores completion positions only; generation in bfloat16 or through dagent's engine; the permuted
control's rewards; a batch's prompts packed as one tree; the step timer; the direction tests'
recorder; TRL's own conversion of an agent chain). Private names change without notice, so:

- `SEAMS` lists each one: where it lives in TRL, what dagent does there, and which dagent modules
  touch it. The modules take the names from here (`GENERATE_TURN`, `SCORE`, ...), never spell them.
- Importing this module checks the installed TRL against `TRL_RANGE` (the release the seams were
  written and tested for; pyproject pins it): another release fails at once, naming the range and
  the seams to re-check, instead of one seam at a time in the middle of a run. Without TRL installed
  (the Space images: no trainer) there is nothing to check.
- tests/train/test_trl_seams.py checks that each seam resolves in the installed TRL, that the guard
  refuses a release outside the range, and that no dagent module names a private TRL attribute
  this list does not hold.

Moving to a new TRL: widen `TRL_RANGE`, run tests/train (the seams' own tests say which broke).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagent.errors import ConfigError

TRL_RANGE = ("1.16.0", "1.17.0")  # [low, high): the release the seams below were written against


@dataclass(frozen=True)
class Seam:
    module: str  # where it lives in TRL
    attr: str  # dotted inside the module
    does: str  # what dagent does there
    users: tuple[str, ...]  # the dagent modules that touch it
    instance: bool = False  # an attribute each instance sets in __init__, not one of the class

    @property
    def name(self) -> str:
        return self.attr.rsplit(".", 1)[-1]

    def resolve(self) -> object:
        """The attribute in the installed TRL (AttributeError / ImportError where it is gone); for an
        instance attribute, its class, once its source is seen to set it."""
        obj: object = importlib.import_module(self.module)
        parts = self.attr.split(".")
        for part in parts[:-1] if self.instance else parts:
            obj = getattr(obj, part)
        if self.instance and f"self.{self.name} =" not in inspect.getsource(obj):  # type: ignore[arg-type]
            raise AttributeError(f"{self.module}.{parts[0]} no longer sets self.{self.name}")
        return obj


GENERATE_TURN = "_generate_single_turn"
GENERATE = "_generate"
METRICS = "_metrics"
TOOL_SUFFIX = "_get_tool_suffix_ids"
SCORE = "_get_per_token_logps_and_entropies"
REWARDS = "_calculate_rewards"
ROLLOUT = "_generate_and_score_completions"
USE_TRITON = "_use_triton"
CHAIN_TO_SEQUENCES = "_chain_to_sequences"
TURNS_FROM_TRACE = "_turns_from_training_trace"

SEAMS = (
    Seam("trl.trainer.utils", USE_TRITON, "a CPU scores the completion's positions only", ("dagent.train.scoring",)),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{GENERATE_TURN}",
        "white-box turns generated in a bfloat16 autocast or by dagent's engine; the step timer's generation",
        ("dagent.train.whitebox.cpu_generation", "dagent.train.whitebox.engine_generation", "dagent.train.timing"),
    ),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{SCORE}",
        "a batch's prompts packed as one tree; the direction tests keep the loss's log-probs",
        ("dagent.train.blackbox.shared_prefix", "dagent.train.verify.direction"),
    ),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{REWARDS}",
        "the permuted control's rewards; the direction tests record and replay rewards",
        ("dagent.train.control", "dagent.train.verify.direction"),
    ),
    Seam(
        "trl.trainer.grpo_trainer", f"GRPOTrainer.{ROLLOUT}", "the step timer's rollout phase", ("dagent.train.timing",)
    ),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{GENERATE}",
        "the direction tests record and replay a batch",
        ("dagent.train.verify.direction",),
    ),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{TOOL_SUFFIX}",
        "the SFT rows' tool suffix is built as TRL builds it (mirrored, not called)",
        ("dagent.train.sft",),
    ),
    Seam(
        "trl.trainer.grpo_trainer",
        f"GRPOTrainer.{METRICS}",
        "the black-box rollouts' metrics join the trainer's logged ones",
        ("dagent.train.blackbox.rollouts",),
        instance=True,
    ),
    Seam(
        "trl.experimental.async_grpo.async_rollout_worker",
        CHAIN_TO_SEQUENCES,
        "the sync black-box path converts an agent chain with TRL's own code",
        ("dagent.train.blackbox.rollouts",),
    ),
    Seam(
        "trl.experimental.async_grpo.openenv_harness",
        TURNS_FROM_TRACE,
        "the sync black-box path reads a training trace with TRL's own code",
        ("dagent.train.blackbox.rollouts",),
    ),
)


def wrap_method(trainer: Any, name: str, marker: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace the seam `trainer.<name>` by `wrap(original)`, an instance attribute (TRL's class
    untouched), once: a method already carrying `marker` is left as it is. Returns whether the
    trainer has it wrapped (False: this TRL has no such method)."""
    method = getattr(trainer, name, None)
    if not callable(method):
        return False
    if getattr(method, marker, False):
        return True
    wrapped = functools.wraps(method)(wrap(method))
    setattr(wrapped, marker, True)
    setattr(trainer, name, wrapped)
    return True


def trl_attr(name: str) -> object:
    """The TRL attribute of the seam called `name`, resolved in the installed TRL."""
    return next(s for s in SEAMS if s.name == name).resolve()


class TRLVersionError(ConfigError):
    """The installed TRL is not the release dagent's TRL seams were written for."""


def _key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_trl(version: str | None = None) -> str | None:
    """Refuse a TRL outside `TRL_RANGE` (TRLVersionError names the range and the seams); returns the
    version checked, or None where TRL is not installed."""
    if version is None:
        try:
            version = importlib.metadata.version("trl")
        except importlib.metadata.PackageNotFoundError:
            return None
    low, high = TRL_RANGE
    if not _key(low) <= _key(version) < _key(high):
        names = ", ".join(f"{s.module}.{s.attr}" for s in SEAMS)
        raise TRLVersionError(
            f"trl {version} is installed; dagent's TRL seams were written for trl >= {low}, < {high} "
            f"({names}): install trl=={low} (pyproject pins it), or re-check each seam on "
            f"{version} (tests/train/test_trl_seams.py) and widen dagent.train.trl_seams.TRL_RANGE"
        )
    return version


check_trl()
