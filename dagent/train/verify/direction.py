"""Does the training signal point the right way? One optimizer step on a fixed batch of real
rollouts, measured (pure torch over a TRL GRPOTrainer; tests/train/test_direction.py runs it on
both loops).

A sign error in an advantage, a loss mask that trains tool output, token ids shifted by one in a
row: each reads exactly like "no learning detected" in a protocol run. So, on one batch the trainer
built from real rollouts (`trainer._generate_and_score_completions`, the code its training step
runs), three checks, each failing on its own kind of fault:

1. `audit`: the tokens the loss trains (the batch's ids under its loss mask) are the tokens the
   sampler produced, at the same positions, and no others (`Record`, the batch as it was built,
   taken before anything downstream could touch it; in the black-box loop the rows were audited
   against the engine's own completions before that, `dagent.train.blackbox.rollouts.token_audit`).
2. `untrained_gradient`: the loss's gradient with respect to each token's log-prob is exactly 0
   wherever the record's mask is 0 (prompt, tool output, realigned context), so perturbing the
   log-prob of an untrained token cannot change the update, and it is non-zero on the trained
   tokens of every rollout with a non-zero advantage.
3. `direction`: one step with the recipe's loss and optimizer (a learning rate large enough to
   see), then, with the model in eval mode and no sampling, the change of each rollout's summed
   log-prob over its trained tokens, judged by advantages from the ENVIRONMENT's rewards
   (`group_advantages`, not the trainer's): the whole batch's step must raise the advantage-weighted
   sum, and each rollout's own term of the loss must raise its tokens where its advantage is
   positive and lower them where it is negative; counted per rollout and per token.

The weights and a fresh optimizer are restored around every step (`Snapshot`), so every variant
(real rewards, permuted rewards, a planted fault) steps from the same start on the same batch.

`audit` (`dagent.train.verify.batch`) compares the batch with a `Record` of the batch as built, and `verify` judges
by the rewards it is given: a check whose truth comes from the trainer is blind upstream of it (F57).
`dagent.train.verify.truth.verify_signal` gives it truth from outside the trainer (the sampler's own output,
the grader's verdicts); `check_arm` checks an arm's wiring against what the run asked for.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from dagent.errors import DagentError
from dagent.train.trl_seams import GENERATE, REWARDS, SCORE
from dagent.train.verify.batch import Record, audit, rows, token_logps

__all__ = [
    "Direction",
    "DirectionError",
    "Shift",
    "Snapshot",
    "check_arm",
    "direction",
    "group_advantages",
    "replaying",
    "rewards_of",
    "untrained_gradient",
    "verify",
]


class DirectionError(DagentError):
    """The training signal does not point where the rewards say it should."""


def group_advantages(rewards: Sequence[float | None], group: int, *, scale: bool = True) -> list[float]:
    """GRPO's advantages from the environment's rewards, written out apart from TRL: within each
    consecutive group of `group`, reward minus the group's mean over graded rollouts, over the
    group's std (+1e-4) when `scale`; an ungraded rollout (None) gets 0 and stays out of the mean."""
    if len(rewards) % group:
        raise DirectionError(f"{len(rewards)} rewards is not a whole number of groups of {group}")
    out: list[float] = []
    for g in range(0, len(rewards), group):
        graded = [float(r) for r in rewards[g : g + group] if r is not None]
        mean = sum(graded) / len(graded) if graded else 0.0
        std = math.sqrt(sum((r - mean) ** 2 for r in graded) / (len(graded) - 1)) if len(graded) > 1 else 0.0
        for r in rewards[g : g + group]:
            out.append(0.0 if r is None else (float(r) - mean) / ((std + 1e-4) if scale else 1.0))
    return out


def check_arm(trainer: Any, control: str) -> None:
    """F57, the arm's wiring, judged from what the run was ASKED for (`control`, from its arguments),
    not from the trainer's batch: a GRPO arm (`none`) must not score through the permuted control's
    code path, and a control must. A GRPO arm silently permuted passes every check that takes its
    expected advantages from the rewards the trainer recorded, since those are the permuted ones."""
    wired = getattr(type(trainer), "dagent_control", "none")
    if wired != control:
        raise DirectionError(
            f"F57: the arm was asked for control {control!r} but its trainer "
            f"({type(trainer).__name__}) scores as {wired!r}: build it with "
            f"dagent.train.control.controlled(..., {control!r})"
        )


def replaying(trainer: Any) -> Any:
    """Make `trainer` record its first generation batch (what `_generate` returned: the rollouts, and
    what `_calculate_rewards` returned: the environment's rewards) and REPLAY both on every later
    `_generate_and_score_completions`, so TRL's own code rebuilds the same batch without new
    rollouts: under `dagent.train.control.controlled(type(trainer), "permuted")` that is the control's
    code path on the same rollouts. The recorded rewards are `trainer.recorded_rewards` (B x funcs)."""
    base = type(trainer)

    class Replay(base):  # type: ignore[misc, valid-type]
        def _generate(self, prompts: list[Any]) -> Any:
            if getattr(self, "_recorded_generation", None) is None:
                self._recorded_generation = getattr(super(), GENERATE)(prompts)
            return copy.deepcopy(self._recorded_generation)

        def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
            if getattr(self, "recorded_rewards", None) is None:
                self.recorded_rewards = getattr(super(), REWARDS)(*args, **kwargs).detach().clone()
            return self.recorded_rewards.clone()

    Replay.__name__ = f"Replaying{base.__name__}"
    trainer.__class__ = Replay
    return trainer


def rewards_of(rewards_per_func: torch.Tensor, weights: torch.Tensor | None = None) -> list[float | None]:
    """Per-rollout rewards from TRL's rewards-per-function tensor: the weighted sum, None where every
    function returned None (NaN: ungraded, kept out of the baseline, F32)."""
    w = torch.ones(rewards_per_func.shape[1]) if weights is None else weights.cpu()
    out: list[float | None] = []
    for row in rewards_per_func.cpu():
        out.append(None if torch.isnan(row).all() else float((row * w).nansum()))
    return out


class Snapshot:
    """The model's weights now; `restore()` puts them back and drops the trainer's optimizer, so the
    next step starts from the same weights with fresh optimizer state."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.state = copy.deepcopy(trainer.model.state_dict())

    def restore(self) -> None:
        self.trainer.model.load_state_dict(self.state)
        self.trainer.optimizer = None
        self.trainer.model.zero_grad(set_to_none=True)


def _loss_and_logps(trainer: Any, batch: dict[str, Any]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The recipe's loss on the batch, keeping the per-token log-prob tensor it was computed from."""
    seen: list[torch.Tensor] = []
    original = getattr(trainer, SCORE)

    def keep(*args: Any, **kwargs: Any) -> Any:
        logps, *rest = original(*args, **kwargs)
        if logps.requires_grad:
            logps.retain_grad()
            seen.append(logps)
        return (logps, *rest)

    setattr(trainer, SCORE, keep)
    if not hasattr(trainer, "current_gradient_accumulation_steps"):  # set by Trainer's loop, which is not running
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    try:
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, batch)
    finally:
        delattr(trainer, SCORE)
    return loss, seen


def _gradient_check(grad: torch.Tensor, record: Record, advantages: Sequence[float]) -> tuple[float, int]:
    untrained = (record.completion_mask == 1) & (record.loss_mask == 0)
    leak = float(grad[untrained].abs().max()) if untrained.any() else 0.0
    starved = sum(
        1
        for i, a in enumerate(advantages)
        if a != 0.0 and record.loss_mask[i].any() and not grad[i][record.loss_mask[i].bool()].any()
    )
    return leak, starved


def _step(trainer: Any, batch: dict[str, Any], optimizer: Callable[[], Any] | None) -> torch.Tensor:
    """One optimizer step of the recipe's loss; returns d loss / d (per-token log-prob)."""
    model = trainer.model
    opt = optimizer() if optimizer else torch.optim.SGD(model.parameters(), lr=trainer.args.learning_rate)
    opt.zero_grad(set_to_none=True)
    loss, seen = _loss_and_logps(trainer, batch)
    loss.backward()
    if not seen or seen[-1].grad is None:
        raise DirectionError("the loss was not computed from per-token log-probs: no gradient to inspect")
    opt.step()
    opt.zero_grad(set_to_none=True)
    return seen[-1].grad.detach()


def untrained_gradient(
    trainer: Any, batch: dict[str, Any], record: Record, advantages: Sequence[float]
) -> tuple[float, int]:
    """(largest |d loss / d log p| on a token the record does not train, rollouts with a non-zero
    advantage whose trained tokens got no gradient). Both must be 0. Row by row; leaves no gradient
    on the model."""
    leak, starved = 0.0, 0
    for i in range(record.rollouts):
        loss, seen = _loss_and_logps(trainer, rows(batch, [i]))
        loss.backward()
        trainer.model.zero_grad(set_to_none=True)
        if not seen or seen[-1].grad is None:
            raise DirectionError("the loss was not computed from per-token log-probs: no gradient to inspect")
        row_leak, row_starved = _gradient_check(seen[-1].grad.detach(), record.rows([i]), [advantages[i]])
        leak, starved = max(leak, row_leak), starved + row_starved
    return leak, starved


@dataclass(frozen=True)
class Shift:
    """One rollout: its advantage, and the change of its trained tokens' log-prob after a step on its
    own term of the loss (`delta`, tokens moved each way) and after the whole batch's step."""

    advantage: float
    delta: float  # change in the summed log-prob of its trained tokens, its own term's step
    tokens: int  # trained tokens
    tokens_up: int  # of those, how many rose
    tokens_down: int
    batch_delta: float = 0.0  # the same after the whole batch's step

    @property
    def tokens_with(self) -> int:
        return self.tokens_up if self.advantage > 0 else self.tokens_down if self.advantage < 0 else 0

    @property
    def tokens_against(self) -> int:
        return self.tokens_down if self.advantage > 0 else self.tokens_up if self.advantage < 0 else 0


@dataclass(frozen=True)
class Direction:
    """The steps' effect on every rollout, judged by `shifts[i].advantage`; `leak` and `starved` are
    the batch step's gradient check (`untrained_gradient`)."""

    shifts: tuple[Shift, ...]
    leak: float = 0.0
    starved: int = 0

    @property
    def objective(self) -> float:
        """Sum over rollouts of advantage x change of summed log-prob after the batch's step: what a
        policy-gradient step raises, to first order, whatever the rollouts share."""
        return sum(s.advantage * s.batch_delta for s in self.shifts)

    @property
    def signed(self) -> list[Shift]:
        return [s for s in self.shifts if s.advantage != 0.0 and s.tokens]

    @property
    def agree(self) -> int:
        return sum(1 for s in self.signed if s.delta * s.advantage > 0)

    @property
    def disagree(self) -> int:
        return len(self.signed) - self.agree

    @property
    def tokens_with(self) -> int:
        return sum(s.tokens_with for s in self.signed)

    @property
    def tokens_against(self) -> int:
        return sum(s.tokens_against for s in self.signed)

    def judged_by(self, advantages: Sequence[float]) -> Direction:
        """The same measured changes, judged by other advantages (the real ones, for a control's step)."""
        if len(advantages) != len(self.shifts):
            raise DirectionError(f"{len(advantages)} advantages for {len(self.shifts)} rollouts")
        return replace(self, shifts=tuple(replace(s, advantage=float(a)) for s, a in zip(self.shifts, advantages)))

    def follows(self, *, token_majority: float = 2 / 3) -> bool:
        """The batch's step raised the advantage-weighted log-prob, every rollout with an advantage
        moved its way on its own term, and so did a clear majority of their tokens."""
        moved = self.tokens_with + self.tokens_against
        return (
            bool(self.signed)
            and self.objective > 0
            and self.disagree == 0
            and moved > 0
            and self.tokens_with / moved >= token_majority
        )

    def summary(self) -> str:
        moved = max(1, self.tokens_with + self.tokens_against)
        deltas = ", ".join(f"A={s.advantage:+.2f}: {s.delta:+.3f}" for s in self.signed)
        return (
            f"batch step: sum of A x change {self.objective:+.3f}; on its own term, {self.agree} of "
            f"{len(self.signed)} rollouts moved their advantage's way, {self.tokens_with} of "
            f"{self.tokens_with + self.tokens_against} tokens ({self.tokens_with / moved:.0%}); summed "
            f"log-prob change by rollout: {deltas}"
        )


def direction(
    trainer: Any,
    batch: dict[str, Any],
    record: Record,
    advantages: Sequence[float],
    snapshot: Snapshot,
    *,
    optimizer: Callable[[], Any] | None = None,
) -> Direction:
    """Steps of the recipe's loss from the snapshot's weights, measured on the record's trained
    tokens and judged by `advantages`: one on the whole batch (its advantage-weighted change of
    summed log-prob must be positive; its gradient checked, `untrained_gradient`), then one per
    rollout with an advantage on that rollout's own row: its own term of the loss, which sums over
    rollouts. Alone, because in a batch of near-alike rollouts (one group, one prompt) each one's
    change is mostly the others' pull through shared weights, while the sign of each rollout's own
    term is what a sign error or a mask bug breaks. Plain SGD at the trainer's learning rate unless
    `optimizer` is given: its step is the loss's gradient itself, where Adam's first step is the
    gradient's elementwise sign and lifts coordinates that cancel to rounding error to full size.

    Row by row: the batch's gradient is accumulated over its rows (the recipe's DAPO loss is a sum
    over tokens over a batch-wide normaliser, so the sum of the rows' gradients IS the batch's; for
    the per-row averaging losses it is a uniform multiple), each row without its padding."""
    if getattr(trainer, "loss_type", "dapo") == "bnpo":
        raise DirectionError(
            "loss_type bnpo normalises by the whole batch's token count: its rows' gradients do "
            "not add up to the batch's; measure the direction of dapo, grpo, dr_grpo or cispo"
        )
    model = trainer.model
    temperature = float(getattr(trainer, "temperature", 1.0))
    n = record.rollouts
    mine = [record.rows([i]) for i in range(n)]
    before = [token_logps(model, r, temperature) for r in mine]
    opt = optimizer() if optimizer else torch.optim.SGD(model.parameters(), lr=trainer.args.learning_rate)
    opt.zero_grad(set_to_none=True)
    leak, starved = 0.0, 0
    for i in range(n):
        loss, seen = _loss_and_logps(trainer, rows(batch, [i]))
        loss.backward()
        if not seen or seen[-1].grad is None:
            raise DirectionError("the loss was not computed from per-token log-probs: no gradient to inspect")
        row_leak, row_starved = _gradient_check(seen[-1].grad.detach(), mine[i], [advantages[i]])
        leak, starved = max(leak, row_leak), starved + row_starved
    opt.step()
    opt.zero_grad(set_to_none=True)
    batch_delta = [float(((token_logps(model, r, temperature) - b) * r.loss_mask).sum()) for r, b in zip(mine, before)]
    snapshot.restore()
    shifts = []
    for i, a in enumerate(advantages):
        trained = mine[i].loss_mask[0].bool()
        if batch["advantages"][i] == 0 or not trained.any():
            shifts.append(Shift(float(a), 0.0, int(trained.sum()), 0, 0, batch_delta[i]))
            continue
        _step(trainer, rows(batch, [i]), optimizer)
        d = (token_logps(model, mine[i], temperature) - before[i])[0][trained]
        snapshot.restore()
        shifts.append(
            Shift(float(a), float(d.sum()), int(trained.sum()), int((d > 0).sum()), int((d < 0).sum()), batch_delta[i])
        )
        if shifts[-1].delta * a <= 0:  # one rollout against its advantage already fails the check
            shifts.extend(Shift(float(b), 0.0, 0, 0, 0, batch_delta[j]) for j, b in enumerate(advantages) if j > i)
            break
    return Direction(tuple(shifts), leak, starved)


def verify(
    trainer: Any,
    batch: dict[str, Any],
    record: Record,
    rewards: Sequence[float | None],
    group: int,
    *,
    snapshot: Snapshot | None = None,
    measured: Direction | None = None,
) -> Direction:
    """All three checks (module docstring) on one batch against the environment's `rewards`;
    raises DirectionError naming the first that fails. Restores the weights afterwards. `measured`:
    the steps of an earlier `verify` on this same batch, judged again by these rewards."""
    snapshot = snapshot or Snapshot(trainer)
    expected = group_advantages(rewards, group, scale=getattr(trainer, "scale_rewards", "group") != "none")
    if not any(expected):
        raise DirectionError(
            "every group scored alike: no rollout has an advantage, nothing to measure "
            "(build the batch from groups with mixed outcomes)"
        )
    problems = audit(batch, record)
    if problems:
        raise DirectionError("the loss trains tokens the sampler did not produce: " + "; ".join(problems[:3]))
    try:
        moved = (
            measured.judged_by(expected)
            if measured is not None
            else direction(trainer, batch, record, expected, snapshot)
        )
    finally:
        snapshot.restore()
    if moved.leak > 0.0:
        raise DirectionError(
            f"tokens the audit calls untrained get a gradient (largest |dL/dlogp| {moved.leak:.3g}): "
            "the loss mask covers tool output or context"
        )
    if moved.starved:
        raise DirectionError(f"{moved.starved} rollouts with an advantage had no gradient on their trained tokens")
    if not moved.follows():
        raise DirectionError("the step does not move log-probs the advantages' way: " + moved.summary())
    return moved
