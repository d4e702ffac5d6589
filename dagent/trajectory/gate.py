"""The trainability gate: may this rollout's agent chain be trained on? Pure.

    train      every call carries engine prompt ids and valid logprobs, no fatal finding stands,
               and the agent chain holds together: no FORK inside it, so it is exactly one
               training sequence. REALIGN (small drift confined to a completion; 6-8 tokens from a
               messages-reconstructing harness) is legitimate and stays `train` (F02).
    eval_only  the capture is sound but not one trainable sequence: the chain forks (drift at or
               past `fork_threshold_tokens`, or reaching into the previous call's prompt, which
               TRL's reconciler cannot realign), the harness re-renders every call
               (`per_turn_capture_only`, F04), or no completion token is trainable. Grade it;
               do not train it.
    reject     a fatal finding: missing prompt ids (never re-render to fill them in, F01),
               missing or misaligned logprobs, no calls at all, no agent chain.

The verdict carries the report figures (mean/max drift, fork and realign fractions, samples per
rollout against turns, auxiliary and sub-agent roots excluded), so the decision and the numbers
behind it travel together. The threshold is the trajectory's own: analyse with the value the
trainer runs with (TRL's `HarnessRolloutWorker` forces 0 under `lossless_capture=True`, its default,
so any drift then forks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dagent.trajectory.analysis import Trajectory

Tier = Literal["train", "eval_only", "reject"]


@dataclass(frozen=True)
class GateVerdict:
    """The gate's decision and the figures it was made on."""

    tier: Tier
    reasons: tuple[str, ...]  # why not `train` (or, for `train`, what was tolerated)
    fork_threshold_tokens: int
    turns: int  # every captured call
    agent_turns: int  # calls in the agent chain
    samples_per_rollout: int  # training sequences the agent chain yields
    drift_mean: float
    drift_max: int
    fork_frac: float
    realign_frac: float
    auxiliary_roots_excluded: int
    subagent_roots_excluded: int
    discarded_turns: int
    trainable_tokens: int

    @property
    def trainable(self) -> bool:
        return self.tier == "train"

    def report(self) -> str:
        """One screen: the tier, the figures, the reasons."""
        lines = [
            f"tier {self.tier}: {self.agent_turns} agent call(s) of {self.turns} -> "
            f"{self.samples_per_rollout} sample(s) per rollout, {self.trainable_tokens} trainable "
            "tokens",
            f"  drift mean {self.drift_mean:.2f} max {self.drift_max} (fork threshold "
            f"{self.fork_threshold_tokens}); fork_frac {self.fork_frac:.4f} realign_frac "
            f"{self.realign_frac:.4f}",
            f"  excluded: {self.auxiliary_roots_excluded} auxiliary root(s), "
            f"{self.subagent_roots_excluded} sub-agent root(s), {self.discarded_turns} discarded "
            "call(s)",
        ]
        lines += [f"  - {reason}" for reason in self.reasons]
        return "\n".join(lines)


def gate(trajectory: Trajectory) -> GateVerdict:
    """Decide the tier of one analysed rollout. Never raises on a bad rollout: that is a verdict."""
    stats = trajectory.stats
    fatal = [str(f) for f in trajectory.fatal]
    held_back: list[str] = []
    if stats.fork:
        fork_drift = max(t.drift for t in trajectory.chain_transitions if t.kind == "fork")
        held_back.append(
            f"the agent chain forks {stats.fork} time(s) (max drift {fork_drift}, threshold "
            f"{trajectory.fork_threshold_tokens}): {stats.samples_per_rollout} sequences instead "
            "of one"
        )
    if trajectory.per_turn_capture_only:
        held_back.append(
            "per_turn_capture_only: every call is its own root (a re-rendering harness); multi-turn credit is lost"
        )
    if not fatal and stats.trainable_tokens == 0:
        held_back.append("no completion token in the agent chain is trainable")
    if fatal:
        tier: Tier = "reject"
        reasons = fatal + held_back
    elif held_back:
        tier, reasons = "eval_only", held_back
    else:
        tier = "train"
        reasons = []
        if stats.realign:
            reasons.append(
                f"{stats.realign} realigned transition(s), drift max {stats.drift_max} < "
                f"{trajectory.fork_threshold_tokens}: legitimate re-rendering drift, kept as one "
                "sequence"
            )
        reasons += [str(f) for f in trajectory.findings if f.level == "warn"]
    return GateVerdict(
        tier=tier,
        reasons=tuple(reasons),
        fork_threshold_tokens=trajectory.fork_threshold_tokens,
        turns=stats.turns,
        agent_turns=stats.agent_turns,
        samples_per_rollout=stats.samples_per_rollout,
        drift_mean=stats.drift_mean,
        drift_max=stats.drift_max,
        fork_frac=stats.fork_frac,
        realign_frac=stats.realign_frac,
        auxiliary_roots_excluded=stats.auxiliary_roots,
        subagent_roots_excluded=stats.subagent_roots,
        discarded_turns=stats.discarded_turns,
        trainable_tokens=stats.trainable_tokens,
    )
