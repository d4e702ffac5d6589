"""`dagent reproduce`: the whole system in one command, with receipts.

Stages, in order (each prints where it is and how long it took; a failed stage stops the run with
its cause and the command that reruns from there, `--from STAGE`):

  suite            build (or pull) the task suite
  smoke-whitebox   the white-box server over HTTP: one episode played with the tools (`bash` runs
                   the reference program, `submit_solution` files what it printed), graded there
  smoke-blackbox   the black-box server over HTTP: one rollout of the base model through opencode
                   and capture; its agent chain through TRL's own conversion, audited token by token
  smoke-harbor     the suite exported as a Harbor catalog, the oracle through `harbor run` on
                   dagent's provider (skipped, and said, where Harbor is not installed)
  eval-base        the base model with the tools agent on the held-out split
  sft              the SFT warm start from oracle demonstrations of the train split
  train-whitebox   white-box GRPO from the warm start
  sft-blackbox     the black-box warm start: demonstrations in the harness's own format (the
                   real harness replaying the reference program, captured as training captures)
  train-blackbox   black-box GRPO from that warm start (sync: the trainer's module served
                   in-process; pi on cpu, pi and opencode on gpu; the preset's group size)
  eval-checkpoint  the white-box trained checkpoint against the base model, both served at once,
                   paired
  report           results.md (the paired evaluation, its tables and plots, the stage table) and
                   validation.md (a receipt per stage)

Every stage that has a command of its own (`dagent eval`, `jobs/sft_warmstart.py`, `dagent train
...`, `dagent export harbor`) runs exactly that command as a subprocess, so the rerun line in the
receipts is the command that ran. Receipts are computed from what the stages wrote: exact-token
audits, weights changed (tensor by tensor against the starting model), optimizer state present
and restoring onto its own weights (moments shaped as their parameters, step = global step), exclusions by cause.

Profiles: `cpu` (this machine: SmolLM2-135M, small sizes, about 66 minutes) and `gpu` (the
published recipes, vLLM on the GPU; run it as an HF Job: it is printed here, not exercised).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dagent.engine.models import model_dir
from dagent.errors import ConfigError
from dagent.eval.report import load_records
from dagent.eval.scoring import paired
from dagent.provenance import suite_revision
from dagent.reproduce.checkpoints import checkpoint_receipt
from dagent.reproduce.profiles import Profile
from dagent.reproduce.receipts import checks_for, write_reports
from dagent.reproduce.smokes import smoke_blackbox, smoke_harbor, smoke_whitebox
from dagent.reproduce.stages import Stage, StageError
from dagent.suites.sources import load_tasks
from dagent.train.blackbox.rollouts import audit_clean

STAGES = (
    "suite",
    "smoke-whitebox",
    "smoke-blackbox",
    "smoke-harbor",
    "eval-base",
    "sft",
    "train-whitebox",
    "sft-blackbox",
    "train-blackbox",
    "eval-checkpoint",
    "report",
)
ROOT = Path(__file__).resolve().parents[2]  # the project: stages run `jobs/...` from here


class Reproduction:
    """The stages over one output directory; `stages.json` there records each stage's receipt."""

    def __init__(
        self,
        out: str | Path,
        profile: Profile,
        *,
        suite: str | None = None,
        load_suite: Callable[[str | None], Any] = load_tasks,
        echo: Callable[[str], None] = print,
    ) -> None:
        """`load_suite` loads `suite` (None: the bundled build); the command line passes one that
        builds the bundled suite on first use."""
        self.out, self.profile, self.suite_source, self.echo = Path(out).resolve(), profile, suite, echo
        self.load_suite = load_suite
        self.out.mkdir(parents=True, exist_ok=True)
        self.state_path = self.out / "stages.json"
        saved = json.loads(self.state_path.read_text()) if self.state_path.is_file() else {}
        self.stages = {name: Stage(**saved[name]) if name in saved else Stage(name) for name in STAGES}
        self._suite: Any = None

    # -- running --------------------------------------------------------------------------------
    def run(self, start: str | None = None, stop: str | None = None) -> dict[str, Stage]:
        names = list(STAGES)
        first = names.index(start) if start else 0
        last = names.index(stop) if stop else len(names) - 1
        for name in names[:first]:
            if self.stages[name].status not in ("ok", "skipped"):
                raise ConfigError(
                    f"--from {start}: stage {name} has not completed in {self.out} "
                    f"(status {self.stages[name].status}); run from {name}"
                )
        total = time.monotonic()
        for k, name in enumerate(names[first : last + 1], start=first + 1):
            stage = self.stages[name] = Stage(name)
            self.echo(f"[{k}/{len(names)}] {name} ...")
            started = time.monotonic()
            try:
                outcome = getattr(self, "stage_" + name.replace("-", "_"))(stage)
                stage.status = "skipped" if outcome == "skipped" else "ok"
            except Exception as e:  # noqa: BLE001 - recorded, then re-raised with the rerun line
                stage.status, stage.cause = "failed", f"{type(e).__name__}: {e}"
            stage.seconds = round(time.monotonic() - started, 1)
            self._save()
            line = f"[{k}/{len(names)}] {name} {stage.status} in {_clock(stage.seconds)}"
            self.echo(line + (f": {stage.cause}" if stage.cause else ""))
            if stage.status == "failed":
                raise StageError(f"stage {name} failed: {stage.cause}\n  rerun from here: {self.rerun(name)}")
        self.echo(
            f"done in {_clock(time.monotonic() - total)}: {self.out / 'results.md'}, {self.out / 'validation.md'}"
        )
        return self.stages

    def rerun(self, name: str) -> str:
        suite = f" --suite {shlex.quote(self.suite_source)}" if self.suite_source else ""
        return (
            f"dagent reproduce --profile {self.profile.name} --model {shlex.quote(self.profile.model)}"
            f" --out {shlex.quote(str(self.out))}{suite} --from {name}"
        )

    def _save(self) -> None:
        self.state_path.write_text(json.dumps({n: asdict(s) for n, s in self.stages.items()}, indent=1))

    def _cmd(self, stage: Stage, argv: list[str], log: str) -> None:
        """Run a stage's own command (its output to `log`); fail with its tail."""
        stage.command = shlex.join(argv)
        path = self.out / "logs" / log
        path.parent.mkdir(exist_ok=True)
        with path.open("w") as f:
            code = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        if code != 0:
            raise StageError(
                f"`{stage.command}` exited {code}; the end of {path}:\n" + path.read_text(errors="replace")[-1500:]
            )

    @property
    def suite(self) -> Any:
        if self._suite is None:
            self._suite = self.load_suite(self.suite_source)
        return self._suite

    def _suite_args(self) -> list[str]:
        return ["--suite", self.suite_source] if self.suite_source else []

    # -- the stages -----------------------------------------------------------------------------
    def stage_suite(self, stage: Stage) -> None:
        if self.suite_source is None:  # the bundled build: built here when missing (the command line's loader)
            self._suite = self.load_suite(None)
        stage.receipt = suite_revision(self.suite) or {}

    def stage_smoke_whitebox(self, stage: Stage) -> None:
        smoke_whitebox(stage, self.suite, self.profile.eval_split)

    def stage_smoke_blackbox(self, stage: Stage) -> None:
        smoke_blackbox(stage, self.suite, self.profile.eval_split, self.profile.model)

    def stage_smoke_harbor(self, stage: Stage) -> str | None:
        return smoke_harbor(stage, self.suite, self.out, self._suite_args(), self._cmd)

    def _eval(self, stage: Stage, out: Path, model: str, baseline: str | None, log: str) -> dict[str, Any]:
        p = self.profile
        argv = [
            sys.executable,
            "-m",
            "dagent.cli.app",
            "eval",
            "--agent",
            "tools",
            "--preset",
            p.preset,
            "--model",
            model,
            "--split",
            p.eval_split,
            "--limit",
            str(p.eval_limit),
            "--task-seed",
            "0",
            "--samples",
            str(p.eval_samples),
            "--workers",
            str(p.workers),
            "--out",
            str(out),
            *self._suite_args(),
        ]
        if p.engine != "local":
            argv += ["--engine", p.engine]
        if baseline:
            argv += ["--baseline", baseline]
        self._cmd(stage, argv, log)
        return json.loads((out / "scores.json").read_text())

    def stage_eval_base(self, stage: Stage) -> None:
        scores = self._eval(stage, self.out / "eval-base", self.profile.model, None, "eval-base.log")
        stage.receipt = {
            arm: {
                "pass@1": s["pass_at"].get("1"),
                "ci": s.get("pass1_ci"),
                "excluded_by_cause": s.get("excluded_by_cause"),
            }
            for arm, s in scores.items()
        }

    def stage_sft(self, stage: Stage) -> None:
        p = self.profile
        _fresh(self.out / "sft")
        self._cmd(
            stage,
            [
                sys.executable,
                "jobs/sft_warmstart.py",
                "--model",
                p.model,
                "--tools",
                "bash",
                "--n",
                str(p.sft_n),
                "--max-steps",
                str(p.sft_steps),
                "--batch-size",
                "4",
                "--grad-accum",
                "2",
                "--save-steps",
                str(p.sft_steps),
                "--out",
                str(self.out / "sft"),
                *self._suite_args(),
            ],
            "sft.log",
        )
        summary = json.loads((self.out / "sft" / "sft_summary.json").read_text())
        stage.receipt = {
            k: summary.get(k) for k in ("steps", "first_loss", "last_loss", "s_per_step") if k in summary
        } | checkpoint_receipt(self.out / "sft", self._base_weights(), p.sft_steps)

    def stage_train_whitebox(self, stage: Stage) -> None:
        p = self.profile
        out = _fresh(self.out / "grpo")
        self._cmd(
            stage,
            [
                sys.executable,
                "-m",
                "dagent.cli.app",
                "train",
                "whitebox",
                "--preset",
                p.preset,
                "--model",
                str(self.out / "sft" / "final"),
                "--max-steps",
                str(p.grpo_steps),
                "--save-steps",
                str(p.grpo_steps),
                "--warmup-steps",
                "0",
                "--force",
                "--report-to",
                "none",
                "--out",
                str(out),
                *self._suite_args(),
            ],
            "train-whitebox.log",
        )
        stage.receipt = checkpoint_receipt(out, self.out / "sft" / "final", p.grpo_steps)

    def stage_sft_blackbox(self, stage: Stage) -> None:
        p = self.profile
        _fresh(self.out / "sft-blackbox")
        self._cmd(
            stage,
            [
                sys.executable,
                "jobs/sft_warmstart.py",
                "--model",
                p.model,
                "--harness",
                p.blackbox_harness,
                "--n",
                str(p.blackbox_sft_n),
                "--max-steps",
                str(p.blackbox_sft_steps),
                "--batch-size",
                "2",
                "--save-steps",
                str(p.blackbox_sft_steps),
                "--out",
                str(self.out / "sft-blackbox"),
                *self._suite_args(),
            ],
            "sft-blackbox.log",
        )
        summary = json.loads((self.out / "sft-blackbox" / "sft_summary.json").read_text())
        stage.receipt = {
            k: summary.get(k) for k in ("rows", "steps", "first_loss", "last_loss", "s_per_step") if k in summary
        } | checkpoint_receipt(self.out / "sft-blackbox", self._base_weights(), p.blackbox_sft_steps)

    def stage_train_blackbox(self, stage: Stage) -> None:
        p = self.profile
        out = _fresh(self.out / "blackbox")
        self._cmd(
            stage,
            [
                sys.executable,
                "-m",
                "dagent.cli.app",
                "train",
                "blackbox",
                "--mode",
                "sync",
                "--preset",
                p.preset,
                "--model",
                str(self.out / "sft-blackbox" / "final"),
                "--harness",
                p.blackbox_harness,
                "--max-steps",
                str(p.blackbox_steps),
                "--save-steps",
                str(p.blackbox_steps),
                "--warmup-steps",
                "0",
                "--force",
                "--report-to",
                "none",
                "--out",
                str(out),
                *self._suite_args(),
            ],
            "train-blackbox.log",
        )
        rows = [json.loads(line) for line in (out / "receipts.jsonl").read_text().splitlines()]
        graded = [r for r in rows if r["dropped"] is None]
        stage.receipt = {
            "rollouts": len(rows),
            "by_harness": _count(r["harness"] for r in rows),
            "outcomes": _count(r["outcome"] for r in rows),
            "exact_token_audit": _count(r["audit"] for r in rows),
            "trained_rollouts": len(graded),
            "trained_tokens": sum(r["trained_tokens"] for r in rows),
            "auxiliary_calls_excluded": sum(r["other_calls"] for r in rows),
            "samples_per_rollout": (sum(r["sequences"] for r in graded) / len(graded)) if graded else None,
        } | checkpoint_receipt(out, self.out / "sft-blackbox" / "final", p.blackbox_steps)
        if not all(audit_clean(r["audit"]) for r in rows):
            raise StageError(f"a trained row differs from the engine's tokens: {stage.receipt['exact_token_audit']}")

    def stage_eval_checkpoint(self, stage: Stage) -> None:
        scores = self._eval(
            stage, self.out / "eval", str(self.out / "grpo" / "final"), self.profile.model, "eval-checkpoint.log"
        )
        stage.receipt = {
            arm: {
                "pass@1": s["pass_at"].get("1"),
                "ci": s.get("pass1_ci"),
                "excluded_by_cause": s.get("excluded_by_cause"),
            }
            for arm, s in scores.items()
        }
        base, ckpt = (load_records(self.out / "eval" / arm) for arm in ("baseline", "final"))
        comparison = paired(base, ckpt, a_arm=f"baseline ({self.profile.model})", b_arm="final (trained)")
        stage.receipt["paired"] = comparison.model_dump(mode="json")

    def stage_report(self, stage: Stage) -> None:

        verdicts = [
            ok
            for name, st in self.stages.items()
            if name != "report"
            for _, ok in checks_for(name, st.receipt, st.status)
        ]
        stage.command = "dagent.reproduce.receipts.write_reports"
        stage.receipt = {"pass": verdicts.count(True), "fail": verdicts.count(False), "skipped": verdicts.count(None)}
        write_reports(self.out, self.profile, self.stages)
        self.echo(
            f"receipts: {stage.receipt['pass']} PASS, {stage.receipt['fail']} FAIL, "
            f"{stage.receipt['skipped']} SKIPPED (validation.md)"
        )

    def _base_weights(self) -> Path:
        return model_dir(self.profile.model)


def _fresh(run_dir: Path) -> Path:
    """A training stage's output directory, emptied: its rerun replaces it (no stale checkpoint-N)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    return run_dir


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[str(item)] = out.get(str(item), 0) + 1
    return out


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s"


def failed_receipts(stages: dict[str, Stage]) -> int:
    """How many receipts FAIL across the stages that ran (the report stage's count, else each stage's)."""
    report = stages.get("report")
    if report is not None and report.receipt:
        return int(report.receipt.get("fail", 0))
    return sum(
        ok is False
        for name, st in stages.items()
        if name != "report"
        for _, ok in checks_for(name, st.receipt, st.status)
    )


def reproduce(
    profile: str = "cpu",
    out: str = "runs/reproduce",
    *,
    model: str | None = None,
    suite: str | None = None,
    start: str | None = None,
    stop: str | None = None,
    load_suite: Callable[[str | None], Any] = load_tasks,
    echo: Callable[[str], None] = print,
) -> dict[str, Stage]:
    if start is not None and start not in STAGES:
        raise ConfigError(f"unknown stage {start!r}: one of {', '.join(STAGES)}")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return Reproduction(out, Profile.named(profile, model), suite=suite, load_suite=load_suite, echo=echo).run(
        start, stop
    )
