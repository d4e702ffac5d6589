"""Results files from evaluation records: `results.md` and four PNG plots.

The numbers come from `dagent.eval.scoring` and nothing here recomputes them. As there, every table
puts the exclusions (tasks with no graded sample, by cause) BEFORE the scores, and only graded
samples enter a score or the reward plot (F24, F32). Arms keep the caller's order (a list of
checkpoints reads left to right). Plots are drawn with matplotlib's Agg canvas, imported only
when plotting, so the rest of dagent never needs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dagent.core.conditions import conditions_differ
from dagent.core.outcome import EvalRecord
from dagent.errors import ConfigError, DagentError, MissingDependencyError
from dagent.eval.scoring import TIERS, WRONG_CATEGORIES, GroupScores, Paired, Scores, paired, task_scores
from dagent.provenance import provenance_lines, void_reason

PLOTS = ("pass_at_1.png", "pass_at_1_by_tier.png", "rewards.png", "turns.png")


def recorded_conditions(run_dir: str | Path) -> dict[str, Any] | None:
    """The episode conditions an arm recorded: the `summary.json` beside its records.jsonl (an
    evaluation folder, a run's `--out` holding one arm, or the file itself), or, for records published
    as `X.jsonl`, the `conditions` of the `X.json` beside them (None: an older run, or the oracle)."""
    path = Path(run_dir)
    try:
        file = records_file(path)
    except ConfigError:  # no records there (yet): only a summary of its own can say
        file = path / "records.jsonl"
    about = file.parent / "summary.json" if file.name == "records.jsonl" else file.with_suffix(".json")
    if not about.is_file():
        return None
    return json.loads(about.read_text()).get("conditions")


def require_same_conditions(a: str | Path, b: str | Path, *, allow_other: bool = False) -> None:
    """Refuse to compare or pool two arms measured under different episode conditions (F47): a
    difference between them would not be the policy's. `allow_other` lets it through."""
    differ = conditions_differ(recorded_conditions(a), recorded_conditions(b))
    if differ and not allow_other:
        raise DagentError(
            f"{a} and {b} were measured under different episode conditions ({'; '.join(differ)}): "
            "a difference between them is not the policy's; rerun one with the other's --preset, or pass "
            "--allow-other-conditions (F47)"
        )


def records_file(path: Path | str) -> Path:
    """Where an evaluation's records are: the file itself, `DIR/records.jsonl`, or, for a run's
    `--out DIR` that holds one arm, that arm's `DIR/<arm>/records.jsonl`."""
    path = Path(path)
    if path.is_file() or path.suffix == ".jsonl":
        file = path
    else:
        file = path / "records.jsonl"
        arms = sorted(p.parent for p in path.glob("*/records.jsonl")) if path.is_dir() and not file.is_file() else []
        if len(arms) == 1:
            return arms[0] / "records.jsonl"
        if len(arms) > 1:
            raise ConfigError(
                f"{path} holds {len(arms)} arms ({', '.join(a.name for a in arms)}): pass one of them, e.g. {arms[0]}"
            )
    if not file.is_file():
        raise ConfigError(
            f"no evaluation records at {file}: pass a directory written by "
            "`dagent eval --out DIR` (it holds records.jsonl) or the records.jsonl itself"
        )
    return file


def load_records(path: Path | str, *, include_void: bool = False) -> list[EvalRecord]:
    """The records of one evaluation: a directory holding `records.jsonl`, or that file. A run
    marked void (`dagent eval void`) is refused, naming its reason, unless `include_void`."""
    file = records_file(path)
    if not include_void and (why := void_reason(file)):
        raise ConfigError(
            f"the run at {file.parent} is void ({why}): it is left out of every table; "
            "pass --include-void to read it anyway"
        )
    records = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if line.strip():
            try:
                records.append(EvalRecord.model_validate_json(line))
            except ValueError as e:
                raise ConfigError(
                    f"{file} line {number} is not an evaluation record ({e.__class__.__name__}): "
                    "regenerate it with `dagent eval`"
                ) from e
    return records


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _causes(causes: Mapping[str, int]) -> str:
    return ", ".join(f"{c} {n}" for c, n in causes.items()) or "none"


def _row(arm: str, tier: str, g: GroupScores, k_values: Sequence[int]) -> str:
    ci = "" if g.pass1_ci is None else f" [{g.pass1_ci[0]:.1%}, {g.pass1_ci[1]:.1%}]"
    ks = [
        _pct(g.pass_at[k]) + (f" (over {g.graded_tasks - g.short_of_k[k]})" if g.short_of_k[k] else "")
        for k in k_values
        if k != 1
    ]
    reward = "n/a" if g.mean_reward is None else f"{g.mean_reward:.3f}"
    cells = [
        arm,
        tier,
        str(g.tasks),
        str(g.graded_tasks),
        f"{g.excluded_tasks} ({_causes(g.excluded_by_cause)})",
        _pct(g.pass_at[1]) + ci,
        *ks,
        reward,
    ]
    return "| " + " | ".join(cells) + " |"


def results_markdown(
    scores: Sequence[Scores],
    comparisons: Sequence[Paired],
    *,
    k_values: Sequence[int],
    title: str,
    provenance: Mapping | None = None,
) -> str:
    """The text of results.md (pure)."""
    extra_k = [k for k in k_values if k != 1]
    out = [
        f"# {title}",
        "",
        "## Exclusions",
        "",
        "Scores are over graded tasks only: an ungraded sample is left out, never scored 0, and a "
        "task with no graded sample is excluded under its most frequent cause.",
        "",
    ]
    for s in scores:
        out.append(
            f"- {s.arm}: {s.excluded_tasks} of {s.tasks} tasks excluded ({_causes(s.excluded_by_cause)}); "
            f"{s.samples - s.graded_samples} of {s.samples} samples ungraded ({_causes(s.ungraded_by_cause)})"
            + "".join(
                f"; {n} graded tasks have fewer than {k} graded samples, left out of pass@{k}"
                for k, n in s.short_of_k.items()
                if n
            )
        )
    out += [
        "",
        "## Scores per arm and tier",
        "",
        "| arm | tier | tasks | graded | excluded (by cause) | pass@1 [95% CI] | "
        + "".join(f"pass@{k} | " for k in extra_k)
        + "mean reward |",
        "|" + "---|" * (7 + len(extra_k)),
    ]
    for s in scores:
        out.append(_row(s.arm, "all", s, k_values))
        out += [_row(s.arm, tier, g, k_values) for tier, g in s.by_tier.items()]
    capped = [s for s in scores if s.step_cap is not None]
    if capped:
        out += [
            "",
            "Graded samples whose tool calls reached the step cap: "
            + "; ".join(f"{s.arm} {_pct(s.at_step_cap)} (cap {s.step_cap})" for s in capped),
        ]
    cut = [s for s in scores if s.cut_off is not None]
    if cut:
        out += [
            "",
            "Samples cut off mid-task (step cap, call budget, completion budget, context, "
            "timeout): "
            + "; ".join(
                f"{s.arm} {_pct(s.cut_off)} ("
                + (", ".join(f"{c} {n}" for c, n in s.cut_off_by.items()) or "none")
                + ")"
                for s in cut
            ),
        ]
    used = [c for c in WRONG_CATEGORIES if any(c in s.wrong_by_category for s in scores)]
    out += ["", "## Wrong answers by category", ""]
    if used:
        out += ["| arm | wrong | " + " | ".join(used) + " |", "|" + "---|" * (2 + len(used))]
        out += [
            f"| {s.arm} | {sum(s.wrong_by_category.values())} | "
            + " | ".join(str(s.wrong_by_category.get(c, 0)) for c in used)
            + " |"
            for s in scores
        ]
    else:
        out.append("No wrong answers.")
    if comparisons:
        out += [
            "",
            f"## Paired comparison with the baseline ({comparisons[0].a_arm})",
            "",
            "Per task pass@1 over the tasks graded in both arms; 95% bootstrap CI over tasks; "
            "p from a paired sign-flip permutation test.",
            "",
            "| candidate | tasks in both | excluded (baseline) | excluded (candidate) | only in one arm | "
            "paired | baseline | candidate | difference [95% CI] | p | wins / losses / ties |",
            "|" + "---|" * 11,
        ]
        for p in comparisons:
            diff = "n/a" if p.diff is None or p.ci is None else f"{p.diff:+.1%} [{p.ci[0]:+.1%}, {p.ci[1]:+.1%}]"
            pv = "n/a" if p.p_value is None else "<0.001" if p.p_value < 0.001 else f"{p.p_value:.3f}"
            out.append(
                f"| {p.b_arm} | {p.tasks_in_both} | {_causes(p.excluded_a_by_cause)} | "
                f"{_causes(p.excluded_b_by_cause)} | {p.only_a + p.only_b} | {p.paired_tasks} | "
                f"{_pct(p.mean_a)} | {_pct(p.mean_b)} | {diff} | {pv} | {p.wins} / {p.losses} / {p.ties} |"
            )
    if provenance:
        out += ["", "## Provenance", "", *provenance_lines(dict(provenance))]
    return "\n".join(out) + "\n"


def write_results(
    out_dir: Path | str,
    arms: Mapping[str, Sequence[EvalRecord]],
    *,
    k_values: Sequence[int] = (1,),
    baseline: str | None = None,
    title: str = "Evaluation results",
    step_cap: int | Mapping[str, int] | None = None,
    provenance: Mapping | None = None,
) -> list[Path]:
    """Write results.md and the PLOTS into `out_dir` for `arms` (label -> that arm's records);
    with `baseline`, every other arm is compared with it task by task. `step_cap` is one cap for
    every arm or each arm's own (agents differ: opencode's step limit is not the tool loop's).
    Returns the paths written."""
    if not arms:
        raise ConfigError("write_results needs at least one arm: pass {label: records}")
    if baseline is not None and baseline not in arms:
        raise ConfigError(f"baseline {baseline!r} is not one of the arms {list(arms)}: pass one of those labels")
    k_values = tuple(sorted(set(k_values) | {1}))
    caps = dict(step_cap) if isinstance(step_cap, Mapping) else {name: step_cap for name in arms}
    scores = [task_scores(rs, k_values, step_cap=caps.get(name), arm=name) for name, rs in arms.items()]
    comparisons = (
        []
        if baseline is None
        else [paired(arms[baseline], rs, a_arm=baseline, b_arm=name) for name, rs in arms.items() if name != baseline]
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "results.md"
    md.write_text(results_markdown(scores, comparisons, k_values=k_values, title=title, provenance=provenance))
    return [md, *_plots(out, scores, arms, title, sorted({c for c in caps.values() if c is not None}))]


def _plots(
    out: Path, scores: Sequence[Scores], arms: Mapping[str, Sequence[EvalRecord]], title: str, step_caps: Sequence[int]
) -> list[Path]:
    try:
        import numpy as np
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        raise MissingDependencyError("matplotlib", purpose="the results plots") from e

    names = [s.arm for s in scores]
    colors = [f"C{i % 10}" for i in range(len(names))]

    def figure(width: float = 7.0):
        fig = Figure(figsize=(max(width, 1.1 * len(names) + 3), 4.5), dpi=110)
        FigureCanvasAgg(fig)
        return fig, fig.add_subplot()

    def save(fig, name: str) -> Path:
        fig.tight_layout()
        fig.savefig(out / name)
        return out / name

    def bars(ax, x, groups: Sequence[GroupScores], width, color, label=None, counts=True, values=True):
        vals = [g.pass_at[1] or 0.0 for g in groups]
        err = [
            [max(0.0, v - g.pass1_ci[0]) if g.pass1_ci else 0.0 for v, g in zip(vals, groups)],
            [max(0.0, g.pass1_ci[1] - v) if g.pass1_ci else 0.0 for v, g in zip(vals, groups)],
        ]
        ax.bar(x, vals, width, yerr=err, capsize=4, color=color, label=label, edgecolor="black", linewidth=0.5)
        for xi, v, g in zip(x, vals, groups) if values else ():
            top = g.pass1_ci[1] if g.pass1_ci else v
            text = f"{v:.0%}" + (f"\nn={g.graded_tasks}" if counts else "")
            text = "n/a: no\ngraded task" if g.pass_at[1] is None else text
            inside = top > 0.86 and v > 0.2  # no room above: write it at the bar's foot, in white
            ax.text(
                xi,
                0.02 if inside else top + 0.02,
                text,
                ha="center",
                va="bottom",
                color="white" if inside else "black",
                fontsize=8 if counts else 7,
            )

    paths = []
    fig, ax = figure()
    bars(ax, list(range(len(names))), scores, 0.6, colors)
    ax.set_xticks(
        range(len(names)), names, rotation=20 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center"
    )
    ax.set(
        ylim=(0, 1),
        xlabel="arm",
        ylabel="pass@1 over graded tasks",
        title=f"{title}: pass@1 (95% bootstrap CI over tasks)",
    )
    ax.grid(axis="y", alpha=0.3)
    paths.append(save(fig, PLOTS[0]))

    tiers = [t for t in TIERS if any(t in s.by_tier for s in scores)]
    tiers += sorted({t for s in scores for t in s.by_tier} - set(tiers))
    fig, ax = figure(max(7.0, 2.2 * len(tiers)))
    width = 0.8 / len(names)
    for i, s in enumerate(scores):
        xs = [j - 0.4 + width * (i + 0.5) for j, t in enumerate(tiers) if t in s.by_tier]
        bars(
            ax,
            xs,
            [s.by_tier[t] for t in tiers if t in s.by_tier],
            width,
            colors[i],
            s.arm,
            counts=len(names) <= 2,
            values=len(names) <= 4,
        )
    ax.set_xticks(range(len(tiers)), tiers)
    ax.set(
        ylim=(0, 1),
        xlabel="difficulty tier",
        ylabel="pass@1 over graded tasks",
        title=f"{title}: pass@1 by tier (95% CI)",
    )
    ax.grid(axis="y", alpha=0.3)
    if len(names) > 1:
        ax.legend(title="arm", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    paths.append(save(fig, PLOTS[1]))

    def histogram(
        values: list[list[float]],
        bins,
        xlabel: str,
        name: str,
        what: str,
        none: str,
        xlim: tuple[float, float] | None = None,
        marks: Sequence[int] = (),
    ) -> Path:
        fig, ax = figure()
        present = [(n, c, v) for n, c, v in zip(names, colors, values) if v]
        missing = [n for n, v in zip(names, values) if not v]
        if present:
            ax.hist(
                [v for _, _, v in present],
                bins=bins,
                color=[c for _, c, _ in present],
                weights=[np.full(len(v), 1 / len(v)) for _, _, v in present],
                label=[f"{n} (n={len(v)})" for n, _, v in present],
                edgecolor="black",
                linewidth=0.4,
            )
        if missing:
            ax.text(
                0.5,
                0.5 if not present else 0.97,
                f"{none}: " + ", ".join(missing),
                ha="center",
                va="center" if not present else "top",
                transform=ax.transAxes,
                fontsize=9,
                style="italic",
            )
        for mark, style in zip(marks, ("--", ":", "-.")):
            ax.axvline(mark, color="black", linestyle=style, linewidth=1, label=f"step cap {mark}")
        if xlim is not None:
            ax.set_xlim(*xlim)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel=xlabel, ylabel="fraction of the arm's samples", title=f"{title}: {what}")
        ax.grid(axis="y", alpha=0.3)
        if present and (len(names) > 1 or marks):
            ax.legend(fontsize=8, loc="best")
        return save(fig, name)

    rewards = [[r.reward for r in arms[n] if r.outcome != "ungraded" and r.reward is not None] for n in names]
    top = max([1.0] + [max(v) for v in rewards if v])
    paths.append(
        histogram(
            rewards,
            np.linspace(0.0, top + 1e-9, 14),
            "reward per sample (graded samples only)",
            PLOTS[2],
            "reward per graded sample",
            "no graded sample",
        )
    )
    turns = [[r.tool_calls for r in arms[n] if r.tool_calls is not None] for n in names]
    most = max([10, *step_caps] + [max(v) for v in turns if v])
    step = max(1, int(np.ceil((most + 1) / 60)))  # one bin per call count up to 60 calls
    paths.append(
        histogram(
            turns,
            np.arange(0, most + step + 1, step) - 0.5,
            "tool calls per sample (all samples)",
            PLOTS[3],
            "tool calls per sample",
            "no tool count recorded",
            xlim=(-0.5, most + step),
            marks=step_caps,
        )
    )
    return paths


def write_pooled(out_dir: Path | str, result: Any, title: str) -> Path:
    """`pooled.json`, `pooled.md` and `pooled.png` (a forest plot: each seed's paired difference
    with its CI, and the pooled one with its two-level CI) for a `dagent.eval.pooled.Pooled`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import PercentFormatter
    except ImportError as e:
        raise MissingDependencyError("matplotlib", purpose="the pooled plot") from e
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pooled.json").write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    rows = [(f"seed {s}", p.diff, p.ci) for s, p in enumerate(result.per_seed)] + [("pooled", result.diff, result.ci)]
    fig = Figure(figsize=(7.0, 1.0 + 0.55 * len(rows)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for y, (label, diff, ci) in enumerate(reversed(rows)):
        if diff is None or ci is None:
            continue
        color = "black" if label == "pooled" else "C0"
        ax.errorbar(
            [diff],
            [y],
            xerr=[[diff - ci[0]], [ci[1] - diff]],
            fmt="D" if label == "pooled" else "o",
            color=color,
            capsize=4,
        )
        ax.text(ci[1], y, f"  {diff:+.1%} [{ci[0]:+.1%}, {ci[1]:+.1%}]", fontsize=8, va="center")
    ax.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ends = [x for _, _, ci in rows if ci for x in ci] + [0.0]
    span = max(max(ends) - min(ends), 0.05)
    ax.set_xlim(min(ends) - 0.05 * span, max(ends) + 0.5 * span)  # room for the labels right of each interval
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
    ax.set(xlabel=f"{result.b_arm} - {result.a_arm}, pass@{result.k} (95% CI)", title=title)
    fig.tight_layout()
    fig.savefig(out / "pooled.png")
    (out / "pooled.md").write_text(
        f"# {title}\n\n```\n" + "\n".join(result.lines()) + "\n```\n\n![pooled](pooled.png)\n", encoding="utf-8"
    )
    return out / "pooled.md"
