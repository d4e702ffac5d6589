"""results.md and validation.md of `dagent reproduce` (dagent.reproduce.pipeline), from the stages' receipts.

results.md: the stage table (status, time, the command that ran), then the paired evaluation of the
white-box trained checkpoint against the base model (its own results.md, tables and plots, included), the
base model's evaluation and the training receipts in brief.

validation.md: one section per stage with its receipt and a PASS / FAIL / SKIPPED line per check:
the smokes graded (white-box: the reference program through the tools is correct; black-box:
every trained token is the engine's, the gate's tier, exclusions; Harbor: the oracle scores every
task), the checkpoints (optimizer, scheduler and trainer state present; weights changed; restored
to its own weights: moments shaped as their parameters, step = global step), the black-box rows (exact-token audit of
every rollout, auxiliary calls
excluded, samples per rollout), and the evaluations' exclusions by cause.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagent.train.blackbox.rollouts import audit_clean


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def checks_for(name: str, receipt: dict[str, Any], status: str) -> list[tuple[str, bool | None]]:
    """(check, passed) for one stage's receipt; None: not applicable (skipped)."""
    if status == "skipped":
        return [(receipt.get("skipped", "skipped"), None)]
    if status != "ok":
        return [("the stage completed", False)]
    out: list[tuple[str, bool | None]] = []
    if name == "smoke-whitebox":
        out.append(
            (
                f"the reference program through bash + submit_solution graded {receipt.get('outcome')} "
                f"(reward {_fmt(receipt.get('reward'))})",
                receipt.get("outcome") == "correct",
            )
        )
    elif name == "smoke-blackbox":
        audit = receipt.get("exact_token_audit")
        out.append(
            (
                f"every trained token id is the engine's (exact-token audit: {audit}; "
                f"{receipt.get('trained_tokens')} trained tokens)",
                audit_clean(str(audit)),
            )
        )
        out.append(
            (
                f"graded server side: {receipt.get('outcome')} (cause {receipt.get('cause')}), "
                f"{receipt.get('agent_turns')} agent calls of {receipt.get('calls')}, roles {receipt.get('roles')}, "
                f"gate {receipt.get('gate')}",
                receipt.get("outcome") in ("correct", "wrong"),
            )
        )
    elif name == "smoke-harbor":
        out.append((f"the oracle through harbor run: rewards {receipt.get('rewards')}", not receipt.get("errors")))
    elif name in ("eval-base", "eval-checkpoint"):
        for arm, s in receipt.items():
            if arm == "paired" or not isinstance(s, dict):
                continue
            excluded = s.get("excluded_by_cause") or {}
            out.append(
                (
                    f"{arm}: exclusions by cause {excluded or 'none'}; pass@1 {_pct(s.get('pass@1'))} "
                    f"[{', '.join(_pct(x) for x in s.get('ci') or [])}]",
                    not excluded,
                )
            )
        if "paired" in receipt:
            p = receipt["paired"]
            ci = p.get("ci") or [None, None]
            out.append(
                (
                    f"paired over {p.get('paired_tasks')} tasks: {p.get('b_arm')} - {p.get('a_arm')} = "
                    f"{_pct(p.get('diff'))} [95% CI {_pct(ci[0])}, {_pct(ci[1])}], p = {_fmt(p.get('p_value'))}, "
                    f"wins/losses/ties {p.get('wins')}/{p.get('losses')}/{p.get('ties')}",
                    p.get("paired_tasks", 0) > 0,
                )
            )
    if "checkpoint" in receipt:
        state = receipt.get("state_present") or {}
        out.append(
            (
                f"{Path(receipt['checkpoint']).name}: optimizer, scheduler and trainer state present "
                f"({', '.join(k for k, v in state.items() if v)})",
                all(state.values()),
            )
        )
        out.append(
            (
                f"weights changed: {receipt.get('tensors_changed')} of {receipt.get('tensors')} tensors differ "
                "from the starting model",
                (receipt.get("tensors_changed") or 0) > 0,
            )
        )
        restore = receipt.get("restore") or {}
        out.append(
            (
                f"restores onto its own weights: weights equal {restore.get('weights_equal')}, "
                f"{restore.get('optimizer_tensors')} optimizer moments each the shape of its parameter "
                f"(misplaced: {len(restore.get('misplaced') or [])}), optimizer step {restore.get('optimizer_steps')} "
                f"= global step {restore.get('global_step')}",
                bool(restore.get("identical")),
            )
        )
    if name == "train-blackbox":
        audits = receipt.get("exact_token_audit") or {}
        out.append((f"exact-token audit of every rollout's row: {audits}", all(audit_clean(a) for a in audits)))
        out.append(
            (
                f"{receipt.get('rollouts')} rollouts by harness {receipt.get('by_harness')}, outcomes "
                f"{receipt.get('outcomes')}, {receipt.get('auxiliary_calls_excluded')} auxiliary/other calls kept "
                f"out of training, samples per rollout {_fmt(receipt.get('samples_per_rollout'))}",
                receipt.get("samples_per_rollout") in (None, 1.0),
            )
        )
    if name in ("sft", "sft-blackbox"):
        out.append(
            (
                f"loss {_fmt(receipt.get('first_loss'))} -> {_fmt(receipt.get('last_loss'))} over "
                f"{receipt.get('steps')} steps",
                (receipt.get("last_loss") or 1e9) < (receipt.get("first_loss") or 0),
            )
        )
    return out


def validation_markdown(profile: Any, stages: dict[str, Any]) -> str:
    lines = [
        f"# dagent reproduce: validation ({profile.name} profile, {profile.model})",
        "",
        "A receipt per stage: what was checked against what the stage wrote. PASS / FAIL / SKIPPED.",
        "",
    ]
    for name, stage in stages.items():
        if name == "report":
            continue
        lines += [f"## {name}: {stage.status} ({stage.seconds:.0f} s)", ""]
        if stage.command:
            lines += ["```", stage.command, "```", ""]
        if stage.cause:
            lines += [f"cause: {stage.cause}", ""]
        for check, ok in checks_for(name, stage.receipt, stage.status):
            lines.append(f"- {'SKIPPED' if ok is None else 'PASS' if ok else 'FAIL'}: {check}")
        lines.append("")
    return "\n".join(lines)


def results_markdown(profile: Any, stages: dict[str, Any], out: Path) -> str:
    lines = [
        f"# dagent reproduce: results ({profile.name} profile, {profile.model})",
        "",
        "| stage | status | time | command |",
        "|---|---|---|---|",
    ]
    for name, stage in stages.items():
        if name == "report":
            continue
        command = stage.command.replace("|", "\\|")
        lines.append(f"| {name} | {stage.status} | {stage.seconds:.0f} s | `{command[:160]}` |")
    total = sum(s.seconds for s in stages.values())
    lines += ["", f"Total: {total / 60:.1f} min.", ""]
    evaluation = out / "eval" / "results.md"
    if evaluation.is_file():
        lines += [
            "## The white-box trained checkpoint against the base model",
            "",
            "(the evaluation's own results.md; plots in eval/)",
            "",
        ]
        lines += [
            line.replace("](", "](eval/") if line.startswith("![") else line
            for line in evaluation.read_text().splitlines()[1:]
        ]
    base = out / "eval-base" / "results.md"
    if base.is_file():
        lines += ["", "## The base model alone", ""] + base.read_text().splitlines()[1:]
    return "\n".join(lines) + "\n"


def write_reports(out: Path, profile: Any, stages: dict[str, Any]) -> None:
    (out / "validation.md").write_text(validation_markdown(profile, stages))
    (out / "results.md").write_text(results_markdown(profile, stages, out))
