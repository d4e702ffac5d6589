"""Training curves from a run's `trainer_state.json` (what the trainer logged every step): reward
mean with its group spread, the fraction of groups that scored alike (no gradient, F39), tool calls
per rollout, and where each step's seconds went (dagent.train.timing; for black-box runs, the
rollouts against the rest of the step).

    python -m dagent.train.curves runs/lr/grpo/checkpoint-20 --out runs/lr/grpo_curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dagent.errors import ConfigError

PHASES = ("generation", "sandbox_tools", "sandbox_setup", "env_overhead", "scoring", "optimizer")
# The black-box trainer's split: its rollouts (harness, engine, sandbox, grading: `time/rollouts_s`)
# inside TRL's `step_time`; the rest is scoring and the optimizer.
BLACKBOX_PHASES = ("rollouts", "scoring + optimizer")


def history(path: Path | str) -> list[dict[str, Any]]:
    """The per-step log entries of a checkpoint dir (or its trainer_state.json)."""
    path = Path(path)
    state = path / "trainer_state.json" if path.is_dir() else path
    if not state.is_file():
        raise ConfigError(f"no trainer_state.json at {path}: pass a checkpoint-N directory")
    steps = [h for h in json.loads(state.read_text())["log_history"] if "step" in h and "loss" in h]
    if not steps:
        raise ConfigError(f"{state} holds no logged training steps")
    return steps


def reward_key(h: dict[str, Any]) -> str | None:
    return next((k for k in h if k.startswith("rewards/") and k.endswith("/mean")), None)


def tool_calls(steps: list[dict[str, Any]]) -> list[float | None]:
    """Tool calls per rollout a step: TRL's tool loop (white-box) or the harnesses' (black-box)."""
    return [h.get("tools/call_frequency", h.get("blackbox/tool_calls")) for h in steps]


def phases(steps: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Seconds a step by exclusive phase: the white-box split (dagent.train.timing) when logged,
    else the black-box one; empty when the run logged neither."""
    if all(f"time/{p}" in h for h in steps for p in PHASES):
        return {p: [h[f"time/{p}"] for h in steps] for p in PHASES}
    if all("time/rollouts_s" in h and "step_time" in h for h in steps):
        rollouts = [h["time/rollouts_s"] for h in steps]
        rest = [max(h["step_time"] - r, 0.0) for h, r in zip(steps, rollouts)]
        return dict(zip(BLACKBOX_PHASES, (rollouts, rest)))
    return {}


def plot(path: Path | str, out: Path | str) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    steps = history(path)
    x = [h["step"] for h in steps]
    key = reward_key(steps[0])
    fig = Figure(figsize=(12, 7.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    ax = axes[0][0]
    if key:
        mean = [h.get(key) for h in steps]
        std = [h.get("reward_std", 0.0) for h in steps]
        ax.plot(x, mean, marker="o", label="reward mean (the step's rollouts)")
        ax.fill_between(
            x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2, label="+- reward std"
        )
        k = min(5, len(mean))
        running = [
            sum(mean[max(0, i - k + 1) : i + 1]) / len(mean[max(0, i - k + 1) : i + 1]) for i in range(len(mean))
        ]
        ax.plot(x, running, color="black", linewidth=1.5, label=f"running mean of {k}")
    ax.set(title="reward per step", xlabel="step", ylabel="reward")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(x, [h.get("frac_reward_zero_std") for h in steps], marker="o", color="tab:red")
    ax.set(title="groups that scored alike (no gradient)", xlabel="step", ylabel="fraction", ylim=(-0.05, 1.05))
    ax = axes[1][0]
    ax.plot(x, tool_calls(steps), marker="o", label="tool calls per rollout")
    ax.plot(x, [h.get("completions/mean_length", 0) / 100 for h in steps], marker=".", label="completion tokens / 100")
    if "entropy" in steps[0]:
        ax.plot(x, [h.get("entropy") for h in steps], marker=".", label="entropy (nats)")
    ax.set(title="behaviour", xlabel="step")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    split = phases(steps)
    if split:
        bottom = [0.0] * len(x)
        for p, vals in split.items():
            ax.bar(x, vals, bottom=bottom, label=p)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.legend(fontsize=7)
    ax.set(title="seconds per step by phase", xlabel="step", ylabel="s")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="A checkpoint-N directory (holds trainer_state.json).")
    p.add_argument("--out", default=None, help="PNG path (default: CHECKPOINT/../training_curves.png).")
    args = p.parse_args(argv)
    out = args.out or Path(args.checkpoint).resolve().parent / "training_curves.png"
    print(plot(args.checkpoint, out))


if __name__ == "__main__":
    main()
