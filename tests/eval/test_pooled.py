"""A paired difference pooled over training seeds (dagent.eval.pooled): planted gains, a seed that
disagrees, exclusions counted per seed, and the two-level interval wider than the tasks-only one
when the seeds differ."""

from __future__ import annotations

import pytest

from dagent.errors import ConfigError
from dagent.eval.pooled import pooled
from dagent.eval.scoring import bootstrap_ci
from tests.eval.test_scoring import planted, rec


def test_three_seeds_of_a_planted_gain_pool_to_it():
    seeds = [planted(n_tasks=100, flip=0.2, seed=s) for s in (1, 2, 3)]
    p = pooled(seeds, a_arm="warm start", b_arm="GRPO")
    assert p.seeds == 3 and p.pairs == 300 and p.diff == pytest.approx(0.2)
    assert p.ci[0] > 0 and p.ci[0] < 0.2 < p.ci[1] and p.signs_agree
    assert [s.diff for s in p.per_seed] == [pytest.approx(0.2)] * 3
    assert pooled(seeds, a_arm="warm start", b_arm="GRPO") == p  # seeded
    text = "\n".join(p.lines())
    assert (
        "seed 0: 100 tasks paired, excluded none: +20.0%" in text
        and "pooled over 300 (seed, task) pairs: +20.0%" in text
    )


def test_seeds_that_disagree_widen_the_interval_and_are_flagged():
    # one seed gains 30 points, one loses 10, one is flat: the pooled mean is +6.7 points
    gain, loss, flat = (
        planted(n_tasks=60, flip=0.3, seed=4),
        planted(n_tasks=60, flip=0.1, seed=5),
        planted(n_tasks=60, flip=0.0, seed=6),
    )
    seeds = [gain, (loss[1], loss[0]), flat]
    p = pooled(seeds)
    assert p.diff == pytest.approx((0.3 - 0.1 + 0.0) / 3)
    assert p.signs_agree is False and "DISAGREE" in "\n".join(p.lines())
    import numpy as np

    tasks_only = bootstrap_ci(np.concatenate([[1.0] * 18 + [0.0] * 42, [-1.0] * 6 + [0.0] * 54, [0.0] * 60]))
    assert (p.ci[1] - p.ci[0]) > (tasks_only[1] - tasks_only[0])  # seeds resampled, not only tasks


def test_exclusions_are_counted_per_seed_and_left_out_of_the_pool():
    a = [rec("t0", "correct"), rec("t1", "wrong"), rec("t2", "ungraded", cause="sandbox_oom")]
    b = [rec("t0", "correct"), rec("t1", "correct"), rec("t2", "correct")]
    p = pooled([(a, b)])
    assert p.pairs == 2 and p.diff == pytest.approx(0.5)
    assert p.per_seed[0].excluded_a_by_cause == {"sandbox_oom": 1}
    assert "excluded {'sandbox_oom': 1}" in "\n".join(p.lines())
    nothing = pooled([([rec("t0", "ungraded")], [rec("t0", "correct")])])
    assert nothing.diff is None and nothing.ci is None and nothing.signs_agree is None
    with pytest.raises(ConfigError, match="at least one seed"):
        pooled([])


def test_eval_pool_reads_evaluation_dirs_in_pairs_and_writes_the_forest_plot(tmp_path):
    from typer.testing import CliRunner

    from dagent.cli.app import app
    from dagent.eval.experiment import summarize, write_records

    dirs = []
    for s in range(3):
        a, b = planted(n_tasks=40, flip=0.25, seed=10 + s)
        for name, rs in ((f"warm-{s}", a), (f"grpo-{s}", b)):
            write_records(tmp_path / name, rs, summarize(rs))
            dirs.append(str(tmp_path / name))
    r = CliRunner().invoke(
        app,
        ["eval", "pool", *dirs, "--a-arm", "warm start", "--b-arm", "GRPO", "--out", str(tmp_path / "pooled")],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "GRPO - warm start, pass@1, pooled over 3 seeds" in r.output and "+25.0%" in r.output
    assert {p.name for p in (tmp_path / "pooled").iterdir()} == {"pooled.json", "pooled.md", "pooled.png"}
    odd = CliRunner().invoke(app, ["eval", "pool", *dirs[:3]])
    assert odd.exit_code != 0 and "in pairs" in str(odd.exception)


def crossed_run(rng, *, seeds=3, tasks=60, effect=0.1, samples=4):
    """One experiment as the learning run makes it: ONE warm-start evaluation of each task (1 sample),
    shared by every seed, whose GRPO arm is evaluated on the same tasks (`samples` each), GRPO's
    rate the warm start's + `effect`. The true pooled difference is `effect`, known here and not
    from the code under test; the warm start's one draw per task is the shared task noise."""
    p_warm = rng.uniform(0.1, 0.7, size=tasks)
    warm = [rec(f"t{t}", "correct" if rng.random() < p else "wrong") for t, p in enumerate(p_warm)]
    return [
        (
            warm,
            [
                rec(f"t{t}", "correct" if rng.random() < p + effect else "wrong", sample=k)
                for t, p in enumerate(p_warm)
                for k in range(samples)
            ],
        )
        for _ in range(seeds)
    ]


@pytest.mark.failure_mode("F58")
def test_the_crossed_interval_covers_a_shared_baseline_and_the_nested_one_does_not():
    """F58 planted: seeds that share their tasks and one baseline evaluation, pooled as if each seed's
    tasks were its own (the nested bootstrap, the old pooling), cover the true difference well under
    95% of the time; the crossed bootstrap holds it. Truth: the simulation's effect."""
    import numpy as np

    from dagent.eval.pooled import _matrix, nested_ci
    from dagent.eval.scoring import paired_values, tally

    rng = np.random.default_rng(7)
    crossed_hits = nested_hits = 0
    runs = 150
    for r in range(runs):
        seeds = crossed_run(rng)
        p = pooled(seeds, n_boot=600, seed=r)
        assert p.design == "crossed" and p.shared_sd is not None
        crossed_hits += p.ci[0] <= 0.1 <= p.ci[1]
        diffs = []
        for a, b in seeds:
            ids, va, vb = paired_values(tally(a), tally(b), 1)
            diffs.append(vb - va)
        lo, hi = nested_ci(diffs, 600, r)  # the fault: tasks resampled independently per seed
        nested_hits += lo <= 0.1 <= hi
    assert crossed_hits / runs >= 0.9, crossed_hits / runs
    assert nested_hits / runs <= 0.86, nested_hits / runs
    assert nested_hits < crossed_hits
    m, tasks = _matrix([(["t1", "t0"], np.array([1.0, 0.0])), (["t0"], np.array([-1.0]))])
    assert tasks == ["t1", "t0"] and np.isnan(m[1, 0]) and m[1, 1] == -1.0


def test_seeds_on_disjoint_tasks_pool_nested():
    seeds = [planted(n_tasks=40, flip=0.2, seed=s) for s in (1, 2)]
    seeds = [
        (
            [r.model_copy(update={"task_id": f"s{i}-{r.task_id}"}) for r in a],
            [r.model_copy(update={"task_id": f"s{i}-{r.task_id}"}) for r in b],
        )
        for i, (a, b) in enumerate(seeds)
    ]
    p = pooled(seeds)
    assert p.design == "nested" and p.shared_sd is None and p.detectable is not None
    assert "nested seeds x tasks" in "\n".join(p.lines())
