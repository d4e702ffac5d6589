"""The learning protocol's report (docs/learning.md): every arm's pass@1 and the three pooled
comparisons (GRPO - control, GRPO - warm start, control - warm start), from the evaluations' records
wherever they were made:

- one machine's sitting output (`scripts/learning_run.sh`'s `$OUT`): `eval-warm/`, `eval-grpo-S/`,
  `eval-control-S/`;
- the records that sittings on machines which did not outlive their session published into the
  repository (`docs/runs/lr-LOOP/`): `warm.jsonl`, `seed-S/grpo.jsonl`, `seed-S/control.jsonl`, each
  with the `.json` that says what made it (commit, warm start digest, steps, sizes, CPU kind) and the
  arm's `.trainer_state.json` (its logged steps: the training curves' data).

Training curves drawn into the report's folder beforehand (`python -m dagent.train.curves STATE --out
OUT/grpo-S_curves.png`, which the `report` stage does) are shown under their seed.

A seed enters a comparison only with both of its arms evaluated; a seed with one is listed as
pending, never half-pooled. Each pooled difference is stated with the effect its own variance
components could detect, or with no verdict at all (F56: `Pooled.lines`). Where the published
records disagree on what made them (sizes, step counts, the warm start's digest: amendment 2 of
docs/learning.md), the report says so above the figures instead of pooling silently.

Two more sections, both decided before any run they describe:

- **Which tasks the result opened** (F60): with the ledger of opened tasks (`dagent.eval.opened`,
  `docs/runs/opened.json` beside the published runs), how many of the evaluated tasks earlier
  results had opened, by which, and every comparison again on the tasks opened here first. Without
  a ledger the report says that reuse is not ruled out.
- **By template**: each task template's pass@1 per arm (seeds pooled) and GRPO's difference from
  the warm start, the templates grouped as the protocol named them in advance (`AGGREGATES`: the
  templates that compute one aggregate of a column, against every other).

    python -m dagent.eval.learning_report docs/runs/lr-whitebox --out runs/lr-whitebox-report
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dagent.errors import ConfigError
from dagent.eval.opened import Ledger
from dagent.eval.pooled import Pooled, pooled
from dagent.eval.report import load_records, require_same_conditions, write_pooled
from dagent.eval.scoring import task_scores

__all__ = ["ARMS", "COMPARISONS", "Evaluation", "LearningRun", "published", "sitting", "write_report"]

ARMS = ("grpo", "control")  # the trained arms of a seed, beside the one warm start
NAMES = {"warm": "warm start", "grpo": "GRPO", "control": "permuted-reward control"}
# (folder, baseline, candidate): what the report pools, GRPO - control first (the claim)
COMPARISONS = (
    ("pool-grpo-vs-control", "control", "grpo"),
    ("pool-grpo-vs-warm", "warm", "grpo"),
    ("pool-control-vs-warm", "warm", "control"),
)
_FROZEN = ConfigDict(frozen=True, extra="forbid")
# The per-template breakdown's groups, named before the powered black-box run (docs/learning.md): the
# templates whose answer is one aggregate of one column, and every other template.
AGGREGATES = ("min", "max", "total", "median", "mean")


class Evaluation(BaseModel):
    """One arm's `eval` records, and what made them where that was published."""

    model_config = _FROZEN
    arm: str = Field(description="warm, grpo or control.")
    seed: int | None = Field(description="The training seed; None for the warm start.")
    records: Path = Field(description="A records.jsonl, or an evaluation folder holding one arm's.")
    made: dict[str, Any] = Field(default_factory=dict, description="The published .json beside the records.")


class LearningRun(BaseModel):
    """The warm start's evaluation and every trained arm's, by seed."""

    model_config = _FROZEN
    warm: Evaluation
    arms: tuple[Evaluation, ...]
    control_seeds: tuple[int, ...] | None = Field(
        default=None, description="The seeds the design gave a permuted control (CONTROL_SEEDS); None: every seed."
    )

    def of(self, seed: int, arm: str) -> Evaluation | None:
        return next((e for e in self.arms if e.seed == seed and e.arm == arm), None)

    def planned(self, seed: int, arm: str) -> bool:
        """Whether the design trains `arm` at `seed` (a control only at CONTROL_SEEDS where those were named)."""
        return arm != "control" or self.control_seeds is None or seed in self.control_seeds

    @property
    def seeds(self) -> list[int]:
        return sorted({e.seed for e in self.arms if e.seed is not None})

    def complete(self, arms: Sequence[str]) -> list[int]:
        """The seeds every one of `arms` was evaluated for ("warm" always is)."""
        return [s for s in self.seeds if all(a == "warm" or self.of(s, a) for a in arms)]

    def disagreements(self) -> list[str]:
        """What the published records say made them differently (empty where nothing was published)."""
        made = [(self._label(e), e.made) for e in (self.warm, *self.arms) if e.made]
        out = []
        for key in ("sizes", "warm_start_sha256", "bf16_native"):
            seen: dict[str, list[str]] = {}
            for label, m in made:
                if key in m:
                    seen.setdefault(json.dumps(m[key], sort_keys=True), []).append(label)
            if len(seen) > 1:
                out.append(f"{key} differs: " + "; ".join(f"{', '.join(v)}: {k}" for k, v in seen.items()))
        steps = {self._label(e): e.made["steps"] for e in self.arms if "steps" in e.made}
        if len(set(steps.values())) > 1:
            out.append("steps differ: " + ", ".join(f"{k} {v}" for k, v in steps.items()))
        return out

    @staticmethod
    def _label(e: Evaluation) -> str:
        return NAMES[e.arm] if e.seed is None else f"{e.arm} seed {e.seed}"


def _made(records: Path) -> dict[str, Any]:
    about = records.with_suffix(".json")
    return json.loads(about.read_text()) if about.is_file() else {}


def published(root: Path | str) -> LearningRun:
    """The run as published into the repository: ROOT/warm.jsonl and ROOT/seed-S/{grpo,control}.jsonl."""
    root = Path(root)
    warm = root / "warm.jsonl"
    if not warm.is_file():
        raise ConfigError(
            f'no warm start evaluation at {warm}: publish it first (learning_run.sh, STAGES="... '
            'eval publish" EVAL_ARMS=warm)'
        )
    arms = []
    for folder in sorted(root.glob("seed-*"), key=lambda p: p.name):
        if not (m := re.fullmatch(r"seed-(\d+)", folder.name)):
            continue
        for arm in ARMS:
            records = folder / f"{arm}.jsonl"
            if records.is_file():
                arms.append(Evaluation(arm=arm, seed=int(m.group(1)), records=records, made=_made(records)))
    made = _made(warm)
    named = str(made.get("sizes", {}).get("CONTROL_SEEDS", "")).split()  # published since the powered black-box run
    return LearningRun(
        warm=Evaluation(arm="warm", seed=None, records=warm, made=made),
        arms=tuple(arms),
        control_seeds=tuple(int(s) for s in named) if named else None,
    )


def sitting(out: Path | str, seeds: Sequence[int], control_seeds: Sequence[int] | None = None) -> LearningRun:
    """The run as one machine's `scripts/learning_run.sh` left it in OUT (the arms it evaluated);
    `control_seeds`: the seeds the design gave a permuted control (None: every seed)."""
    out = Path(out)
    arms = []
    for seed in seeds:
        for arm in ARMS:
            folder = out / f"eval-{arm}-{seed}"
            if (out / ".done" / folder.name).is_file():
                arms.append(Evaluation(arm=arm, seed=seed, records=folder))
    if not (out / ".done" / "eval-warm").is_file():
        raise ConfigError(f"the warm start was not evaluated in {out}: run the eval stage with EVAL_ARMS=warm first")
    return LearningRun(
        warm=Evaluation(arm="warm", seed=None, records=out / "eval-warm"),
        arms=tuple(arms),
        control_seeds=None if control_seeds is None else tuple(control_seeds),
    )


def template(task_id: str) -> str:
    """A task's template: the middle part of `TABLE.TEMPLATE.HASH` (the whole id where it has no parts)."""
    parts = task_id.split(".")
    return parts[1] if len(parts) >= 3 else task_id


def _only(records: list[Any], tasks: set[str] | None) -> list[Any]:
    return records if tasks is None else [r for r in records if r.task_id in tasks]


def comparisons(run: LearningRun, tasks: set[str] | None = None) -> dict[str, Pooled]:
    """Each comparison of COMPARISONS over the seeds with both of its arms (none where no seed has);
    `tasks`: on those tasks only."""
    found = {}
    for name, a, b in COMPARISONS:
        seeds = run.complete((a, b))
        if not seeds:
            continue
        pairs = [(run.warm if a == "warm" else run.of(s, a), run.of(s, b)) for s in seeds]
        for x, y in pairs:
            require_same_conditions(x.records, y.records)  # F47: a difference must be the policy's
        found[name] = pooled(
            [(_only(load_records(x.records), tasks), _only(load_records(y.records), tasks)) for x, y in pairs],
            a_arm=NAMES[a],
            b_arm=NAMES[b],
        )
    return found


def _pass1(e: Evaluation | None) -> str:
    if e is None:
        return "pending"
    s = task_scores(load_records(e.records))
    text = "n/a" if s.pass_at[1] is None else f"{s.pass_at[1]:.1%}"
    text += f" [{s.pass1_ci[0]:.1%}, {s.pass1_ci[1]:.1%}]" if s.pass1_ci else ""
    return text + (f", {s.excluded_tasks} excluded" if s.excluded_tasks else "")


def opened_section(run: LearningRun, ledger: Ledger | None, result: str) -> list[str]:
    """F60: which of the evaluated tasks earlier results opened, and the comparisons on the rest."""
    records = load_records(run.warm.records)
    ids = list(dict.fromkeys(r.task_id for r in records))
    split = records[0].split if records else "eval"
    head = ["## Which tasks this result opened (F60)", ""]
    if ledger is None:
        return [
            *head,
            f"No ledger of opened tasks beside these records: whether earlier results opened some of "
            f"these {len(ids)} {split} tasks is not ruled out (dagent.eval.opened).",
            "",
        ]
    lines = [*head, ledger.disclosure(result, split, ids), ""]
    own = next((o for o in ledger.openings if o.result == result), None)
    if own is not None and own.how:  # how this result opened them, in the ledger's words (a second opening too)
        lines += [f"The ledger on {result}: {own.how}", ""]
    fresh = set(ledger.fresh(ids, result=result))
    if len(fresh) == len(ids) or not fresh:
        return lines
    lines += [
        f"On the {len(fresh)} tasks opened here first (every arm, every seed, the same tasks):",
        "",
        "| comparison | pooled | 95% CI | detectable (80% power) |",
        "|---|---|---|---|",
    ]
    for p in comparisons(run, fresh).values():
        ci = f"[{p.ci[0]:+.1%}, {p.ci[1]:+.1%}]" if p.ci else "n/a"
        det = f"{p.detectable:.1%}" if p.detectable is not None else "n/a"
        diff = f"{p.diff:+.1%}" if p.diff is not None else "n/a"
        lines.append(f"| {p.b_arm} - {p.a_arm} | {diff} | {ci} | {det} |")
    return [*lines, ""]


def template_section(run: LearningRun) -> list[str]:
    """pass@1 by task template and arm (seeds pooled), grouped as AGGREGATES names them in advance."""

    def by_template(e: Evaluation | None) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = {}
        for r in load_records(e.records) if e else []:
            if r.correct is not None:
                c = out.setdefault(template(r.task_id), [0, 0])
                c[0], c[1] = c[0] + int(bool(r.correct)), c[1] + 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    arms = {"warm": [by_template(run.warm)]}
    for a in ARMS:
        arms[a] = [by_template(run.of(s, a)) for s in run.seeds if run.of(s, a)]
    names = sorted(set(arms["warm"][0]), key=lambda t: (t not in AGGREGATES, t))
    warm_tasks = {r.task_id for r in load_records(run.warm.records)}  # read once: every row counts from it

    def rate(arm: str, names_: Sequence[str]) -> float | None:
        c = sum(d.get(t, (0, 0))[0] for d in arms[arm] for t in names_)
        n = sum(d.get(t, (0, 0))[1] for d in arms[arm] for t in names_)
        return c / n if n else None

    def cell(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1%}"

    def row(label: str, names_: Sequence[str]) -> str:
        tasks = sum(template(t) in names_ for t in warm_tasks)
        w, g, c = rate("warm", names_), rate("grpo", names_), rate("control", names_)
        d = f"{g - w:+.1%}" if g is not None and w is not None else "n/a"
        return f"| {label} | {tasks} | {cell(w)} | {cell(g)} | {cell(c)} | {d} |"

    groups = [
        ("aggregates (" + ", ".join(t for t in AGGREGATES if t in names) + ")", [t for t in names if t in AGGREGATES]),
        ("every other template", [t for t in names if t not in AGGREGATES]),
    ]
    return [
        "## By template",
        "",
        "pass@1 over every sample of every seed that has the arm; GRPO - warm start is the difference of those "
        "rates. The two groups were fixed (`AGGREGATES`) on 2026-12-06, after the powered white-box run (for it "
        "this is a reading after the fact) and before the powered black-box run trained or opened a task.",
        "",
        "| template | tasks | warm start | GRPO | control | GRPO - warm start |",
        "|---|---|---|---|---|---|",
        *[row(f"**{label}**", ts) for label, ts in groups if ts],
        *[row(t, [t]) for t in names],
        "",
    ]


def write_report(
    run: LearningRun,
    out: Path | str,
    *,
    title: str,
    about: Sequence[str] = (),
    ledger: Ledger | None = None,
    result_name: str = "this result",
) -> Path:
    """OUT/results.md (and each comparison's pooled.md / pooled.png beside it); `about` is the
    paragraph that states the sizes (the sitting's own, or read from the published records);
    `ledger`, the opened tasks (F60), and `result_name`, this run's name in it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = run.seeds
    lines = [f"# {title}", "", *about]
    if not about and run.warm.made.get("sizes"):
        lines.append("Sizes, as published: " + ", ".join(f"{k}={v}" for k, v in run.warm.made["sizes"].items()))
    lines.append("")
    if differ := run.disagreements():
        lines += [
            "**What made the records differs** (docs/learning.md, amendment 2: said beside the result):",
            "",
            *[f"- {d}" for d in differ],
            "",
        ]
    missing = {s: [a for a in ARMS if not run.of(s, a)] for s in seeds}
    pending = [
        f"seed {s} ({', '.join(NAMES[a] for a in arms if run.planned(s, a))})"
        for s, arms in missing.items()
        if any(run.planned(s, a) for a in arms)
    ]
    if pending:
        lines += ["Pending, so outside every comparison that needs them: " + "; ".join(pending) + ".", ""]
    if unplanned := [s for s, arms in missing.items() if not all(run.planned(s, a) for a in arms)]:
        lines += [
            f"By design no permuted-reward control at seed{'s' * (len(unplanned) > 1)} "
            + ", ".join(map(str, unplanned))
            + f" (CONTROL_SEEDS={' '.join(map(str, run.control_seeds or ()))}): the comparisons with the control "
            "read the seeds that have one.",
            "",
        ]
    lines += ["## pass@1 on eval, each arm", ""]
    if not seeds:  # only the warm start published so far: its figure, not a table of empty columns
        lines += [f"{NAMES['warm']} (every seed's baseline): {_pass1(run.warm)}. No trained arm evaluated yet.", ""]
    else:
        lines += [
            "| arm | " + " | ".join(f"seed {s}" for s in seeds) + " |",
            "|---" * (len(seeds) + 1) + "|",
            f"| {NAMES['warm']} (one evaluation, every seed's baseline) | "
            + " | ".join([_pass1(run.warm)] * len(seeds))
            + " |",
        ]
        lines += [
            f"| {NAMES[a]} | "
            + " | ".join(_pass1(run.of(s, a)) if run.planned(s, a) else "not in the design" for s in seeds)
            + " |"
            for a in ARMS
        ]
        lines.append("")
    for name, result in comparisons(run).items():
        n = result.seeds
        md = write_pooled(out / name, result, f"{result.b_arm} - {result.a_arm}, pooled over {n} seed{'s' * (n > 1)}")
        body = md.read_text().splitlines()
        lines += ["## " + body[0].lstrip("# "), *body[1:-1], f"![{name}]({name}/pooled.png)", ""]
    lines += opened_section(run, ledger, result_name)
    lines += template_section(run)
    if (out / "watch_curves.png").is_file():  # a sitting's `watch` stage: held-out pass@1 per checkpoint
        lines += ["## Held-out pass@1 at each checkpoint, per seed", "", "![held-out curves](watch_curves.png)", ""]
    for s in seeds:
        drawn = [a for a in ARMS if (out / f"{a}-{s}_curves.png").is_file()]
        if drawn:
            lines += [
                f"## Seed {s}: training curves (the training tasks)",
                "",
                *[f"![training curves, {NAMES[a]}]({a}-{s}_curves.png)" for a in drawn],
                "",
            ]
        if (out / f"watch-{s}" / "results.md").is_file():  # a sitting's `watch` stage, per seed
            lines += [f"Held-out pass@1 at each checkpoint, seed {s}: [watch-{s}/results.md](watch-{s}/results.md)", ""]
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out / "results.md"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("where", type=Path, help="docs/runs/lr-LOOP (published), or a sitting's OUT with --seeds")
    ap.add_argument("--seeds", type=int, nargs="*", help="A sitting's OUT: the seeds it ran (published: found)")
    ap.add_argument(
        "--control-seeds",
        type=int,
        nargs="*",
        help="A sitting's OUT: the seeds the design gave a permuted control (default: every seed; published: "
        "CONTROL_SEEDS in the warm start's sizes)",
    )
    ap.add_argument("--out", type=Path, required=True, help="Where results.md and the pooled plots go")
    ap.add_argument("--title", default="Learning, measured")
    ap.add_argument("--about", default="", help="The sizes paragraph (default: the published sizes)")
    ap.add_argument(
        "--ledger",
        type=Path,
        help="The ledger of opened tasks (F60; default for published runs: opened.json beside their folder)",
    )
    args = ap.parse_args(argv)
    run = sitting(args.where, args.seeds, args.control_seeds) if args.seeds is not None else published(args.where)
    ledger_path = args.ledger or (args.where.parent / "opened.json" if args.seeds is None else None)
    ledger = Ledger.read(ledger_path) if ledger_path and ledger_path.is_file() else None
    print(
        write_report(
            run,
            args.out,
            title=args.title,
            about=[args.about] if args.about else [],
            ledger=ledger,
            result_name=args.where.resolve().name,
        )
    )


if __name__ == "__main__":
    main()
