"""The permuted-reward control (F52): the same run, with each batch's rewards shuffled across its
rollouts before advantages are computed.

A control must change one causal factor and keep the code path: same optimiser, steps, data,
sampling and trainer; only the reward no longer tracks the answer. (A learning rate of 0 leaves the
weights bit-identical to the start, so "no difference" is certain and measures nothing.) TRL
gathers every process's rewards into one tensor before normalising them per group; the control
permutes that tensor's rows with a generator seeded alike on every process, so all ranks agree.
Each permutation is a function of the seed, the optimizer step and the batch's place within that
step (`permutation`), not of a generator's history: a control resumed from checkpoint-N draws at
step N+1 the permutation an unbroken one draws there. Ungraded rollouts (NaN rewards) move with the
permutation and stay out of their new group's baseline, as TRL treats them.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

from dagent.errors import ConfigError
from dagent.train.trl_seams import REWARDS

CONTROLS = ("none", "permuted")


def permutation(n: int, seed: int, step: int = 0, call: int = 0) -> list[int]:
    """The control's order of `n` rewards for the `call`-th batch scored at optimizer step `step`."""
    stream = int.from_bytes(hashlib.sha256(f"{seed}:{step}:{call}".encode()).digest()[:8], "big") >> 1
    return torch.randperm(n, generator=torch.Generator().manual_seed(stream)).tolist()


def controlled(trainer_cls: type, control: str, seed: int = 0) -> type:
    """`trainer_cls` itself for `none`; for `permuted`, a subclass whose rewards are permuted within
    each batch (module docstring). The permutations applied are kept in `.control_permutations`."""
    if control not in CONTROLS:
        raise ConfigError(f"unknown control {control!r}: use {' or '.join(CONTROLS)}")
    if control == "none":
        return trainer_cls

    class PermutedRewards(trainer_cls):  # type: ignore[misc, valid-type]
        control_permutations: list[list[int]]
        dagent_control = "permuted"  # what `dagent.train.verify.direction.check_arm` reads (F57)

        def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
            rewards = getattr(super(), REWARDS)(*args, **kwargs)  # TRL's own (dagent.train.trl_seams)
            if not hasattr(self, "control_permutations"):
                self.control_permutations, self._control_calls = [], {}
            step = int(getattr(getattr(self, "state", None), "global_step", 0) or 0)
            call = self._control_calls[step] = self._control_calls.get(step, -1) + 1
            order = permutation(rewards.shape[0], seed, step, call)
            self.control_permutations.append(order)
            return rewards[torch.tensor(order, device=rewards.device)]

    PermutedRewards.__name__ = f"PermutedRewards{trainer_cls.__name__}"
    return PermutedRewards


class ControlError(ConfigError):
    """F52: a control run whose weights never moved measured nothing."""


def weights_digest(model: Any) -> str:
    """A digest of every trainable parameter's bytes (bit-identical weights, identical digest)."""

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        if p.requires_grad:
            h.update(name.encode())
            h.update(p.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def control_moved_callback() -> Any:
    """The F52 detector, a `transformers.TrainerCallback` for a control run: the trainable weights'
    digest where this process starts training (after a resume's load) and where it stops; when at
    least one optimizer step ran and they are bit-identical, `ControlError` names F52 (a learning rate
    of 0, a frozen model, a skipped optimizer): the control compared nothing against the run."""
    from transformers import TrainerCallback

    class ControlMoved(TrainerCallback):
        start: tuple[int, str] | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            self.start = (state.global_step, weights_digest(model))

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if self.start is None or state.global_step <= self.start[0]:
                return
            if weights_digest(model) == self.start[1]:
                raise ControlError(
                    "F52: the control's weights are bit-identical after steps "
                    f"{self.start[0] + 1}..{state.global_step}: "
                    f"it trained nothing (learning rate {args.learning_rate}), so it cannot differ from its baseline; "
                    "run the control with the run's own learning rate and optimiser"
                )

    return ControlMoved()
