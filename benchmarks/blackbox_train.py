# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[all]"]
# ///
"""Benchmark: black-box (pi) rollouts TRAINED per hour, arms side by side in one run.

Each arm is `dagent train blackbox --mode sync --preset cpu --harness pi` from the same warm start
(a checkpoint trained in pi's own format, `jobs/sft_warmstart.py --harness pi`), the same seed and
the same training split, run as its own process one after another (nothing else running), for
`--steps` steps. An arm may run another source tree (`--before-src DIR`: e.g. a `git archive` of
the commit to compare against, with this checkout's node_modules linked in), so "before" is the
code as it was, not a flag in today's code. Per arm it prints the step's split (TRL's
`step_time`: the whole optimizer step, rollouts included; `time/rollouts_s`: the group's black-box
rollouts, generation, harness and sandbox; the rest: scoring, forward, backward, optimizer), the
rollouts a step, how many became trained rows (a row with at least one token under mask 1) and

    rollouts trained per hour = 3600 x trained rows / the steps' seconds (model load excluded)

then the ratio of each arm to the first. Rollouts, completion lengths and turns come from the run's
own receipts (`receipts.jsonl`), so a lever that shortened rollouts by breaking them shows as fewer
trained rows or other outcomes, not as speed.

    python benchmarks/blackbox_train.py --model /root/dagent-runs/lr-blackbox/sft/final \\
        --suite ~/.cache/dagent/suite --before-src /tmp/before59 --steps 3 \\
        --arm "before=--src before" --arm "after=" --arm "after, 4 groups a step=--groups-per-step 4"

An arm is `NAME=ARGS`: ARGS are extra `dagent train blackbox` options (a later `--model` overrides
the common one), plus `--src before` to run the `--before-src` tree or `--src DIR` another tree.
Figures measured with it: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Arm:
    name: str
    args: list[str]
    src: Path
    steps: list[dict[str, float]] = field(default_factory=list)
    receipts: list[dict] = field(default_factory=list)
    wall: float = 0.0

    @classmethod
    def parse(cls, spec: str, before: Path | None) -> Arm:
        name, _, rest = spec.partition("=")
        args, src = shlex.split(rest), ROOT
        if "--src" in args:
            i = args.index("--src")
            if args[i + 1] == "before":
                if before is None:
                    raise SystemExit(f"arm {name!r}: --src before needs --before-src DIR")
                src = before
            else:
                src = Path(args[i + 1]).resolve()
                if not (src / "dagent").is_dir():
                    raise SystemExit(f"arm {name!r}: --src {args[i + 1]} is not a dagent source tree")
            args = args[:i] + args[i + 2 :]
        return cls(name.strip(), args, src)

    @property
    def copied_groups(self) -> tuple[int, int]:
        """(groups whose rollouts are all alike, groups): a run of consecutive receipts of one task is
        a group; alike = the same outcome, prompt and completion length in every rollout (F61: one
        draw copied; a real group of 4+ draws matching on all three is rare)."""
        groups: list[list[dict]] = []
        for r in self.receipts:
            if groups and groups[-1][0].get("task_id") == r.get("task_id"):
                groups[-1].append(r)
            else:
                groups.append([r])
        keys = ("outcome", "prompt_tokens", "completion_tokens")
        alike = sum(1 for g in groups if len(g) > 1 and len({tuple(r.get(k) for k in keys) for r in g}) == 1)
        return alike, len(groups)

    @property
    def seconds(self) -> float:
        return sum(s["step_time"] for s in self.steps)

    @property
    def trained(self) -> int:
        return sum(1 for r in self.receipts if r.get("trained_tokens", 0) > 0)

    @property
    def per_hour(self) -> float:
        return 3600 * self.trained / self.seconds if self.seconds else 0.0


def run_arm(arm: Arm, a: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bb-bench-") as out:
        cmd = [
            sys.executable,
            "-m",
            "dagent.cli.app",
            "train",
            "blackbox",
            "--mode",
            "sync",
            "--preset",
            "cpu",
            "--harness",
            "pi",
            "--model",
            a.model,
            "--max-steps",
            str(a.steps),
            "--save-steps",
            str(a.steps),
            "--seed",
            str(a.seed),
            "--split",
            a.split,
            "--force",
            "--out",
            out,
            *arm.args,
        ]
        if a.suite:
            cmd += ["--suite", a.suite]
        env = {**os.environ, "PYTHONPATH": str(arm.src)}
        print(f"== {arm.name}: {shlex.join(cmd[3:])} (source {arm.src})", flush=True)
        started = time.monotonic()
        done = subprocess.run(cmd, env=env, cwd=arm.src, capture_output=True, text=True)
        arm.wall = time.monotonic() - started
        if done.returncode:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit(f"arm {arm.name!r} failed (rc {done.returncode})")
        state = Path(out) / f"checkpoint-{a.steps}" / "trainer_state.json"
        history = json.loads(state.read_text())["log_history"]
        arm.steps = [
            {"step_time": h["step_time"], "rollouts": h.get("time/rollouts_s", 0.0)}
            for h in history
            if "step_time" in h
        ]
        arm.receipts = [json.loads(line) for line in (Path(out) / "receipts.jsonl").read_text().splitlines()]


def report(arms: list[Arm]) -> str:
    lines = [
        f"{'arm':<28} {'steps':>5} {'rollouts':>8} {'trained':>7} {'correct':>7} {'step s':>7} "
        f"{'rollout s':>9} {'other s':>7} {'tok/rollout':>11} {'turns':>5} {'copied':>7} {'per hour':>8} {'x':>5}"
    ]
    first = arms[0].per_hour or 1.0
    for arm in arms:
        n = len(arm.receipts) or 1
        roll = sum(s["rollouts"] for s in arm.steps)
        correct = sum(1 for r in arm.receipts if r.get("outcome") == "correct")
        tokens = sum(r.get("completion_tokens", 0) for r in arm.receipts) / n
        turns = sum(r.get("agent_turns", 0) for r in arm.receipts) / n
        lines.append(
            f"{arm.name:<28} {len(arm.steps):>5} {len(arm.receipts):>8} {arm.trained:>7} {correct:>7} "
            f"{arm.seconds:>7.1f} {roll:>9.1f} {arm.seconds - roll:>7.1f} {tokens:>11.0f} {turns:>5.2f} "
            f"{'%d/%d' % arm.copied_groups:>7} {arm.per_hour:>8.0f} {arm.per_hour / first:>5.2f}"
        )
    lines.append(
        "step s: TRL's step_time summed (rollouts, scoring, forward, backward, optimizer; model load "
        "excluded); rollout s: the black-box rollouts of those steps; copied: groups whose rollouts all "
        "match in outcome, prompt and completion length (one draw copied, F61) / groups; per hour: "
        "trained rows / step s"
    )
    for arm in arms:
        lines.append(
            f"{arm.name}: per step "
            + ", ".join(f"{s['step_time']:.0f} s ({s['rollouts']:.0f} rollouts)" for s in arm.steps)
            + f"; process wall {arm.wall:.0f} s"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the warm start (trained in pi's own format)")
    p.add_argument("--suite", default=None)
    p.add_argument("--split", default="train:easy")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--before-src", type=Path, default=None, help="another source tree for `--src before` arms")
    p.add_argument("--arm", action="append", default=None, help="NAME=ARGS (repeatable; default: before and after)")
    a = p.parse_args()
    specs = a.arm or (["before=--src before", "after="] if a.before_src else ["after="])
    arms = [Arm.parse(s, a.before_src.resolve() if a.before_src else None) for s in specs]
    for arm in arms:
        run_arm(arm, a)
        print(report([arm]).splitlines()[1], flush=True)
    print(report(arms))


if __name__ == "__main__":
    main()
