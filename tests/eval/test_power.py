"""What a design could detect (dagent.eval.power): variance components recovered from planted
runs, the detectable effect against a simulation of the design, and the verdict that refuses to
state a result without it (F56)."""

from __future__ import annotations

import numpy as np
import pytest

from dagent.eval.pooled import pooled
from dagent.eval.power import Components, PowerError, mde, task_sd_at, verdict
from tests.eval.test_scoring import planted, rec


def simulated(seed_sd: float, task_sd: float, seeds: int, tasks: int, effect: float, rng) -> list[np.ndarray]:
    means = effect + rng.normal(0, seed_sd, size=seeds)
    return [m + rng.normal(0, task_sd, size=tasks) for m in means]


def test_components_recover_the_planted_spreads():
    rng = np.random.default_rng(0)
    runs = [Components.of(simulated(0.05, 0.3, 40, 200, 0.0, rng)) for _ in range(20)]
    assert np.mean([c.task_sd for c in runs]) == pytest.approx(0.3, rel=0.02)
    assert np.mean([c.seed_sd for c in runs]) == pytest.approx(0.05, rel=0.2)
    flat = Components.of(simulated(0.0, 0.3, 3, 24, 0.0, np.random.default_rng(1)))
    assert flat.seed_sd >= 0.0 and flat.seeds == 3 and flat.tasks == 24
    with pytest.raises(PowerError, match="at least 2 tasks"):
        Components.of([[0.1], [0.2]])


def test_the_detectable_effect_is_detected_four_times_in_five():
    """Simulate the design at its own detectable effect: a two-sided z-test rejects in about 80%."""
    comps = Components(task_sd=0.25, seed_sd=0.04, seeds=3, tasks=64)
    d = mde(comps, seeds=3, tasks=64)
    se = np.sqrt(0.04**2 / 3 + 0.25**2 / (3 * 64))
    assert d == pytest.approx(2.8016 * se, rel=1e-3)
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(4000):
        mean = np.concatenate(simulated(0.04, 0.25, 3, 64, d, rng)).mean()
        hits += abs(mean / se) > 1.96
    assert hits / 4000 == pytest.approx(0.8, abs=0.03)
    # more tasks narrow it, but never below what the seeds alone allow
    assert mde(comps, seeds=3, tasks=256) < d
    assert mde(comps, seeds=3, tasks=10**9) == pytest.approx(2.8016 * 0.04 / np.sqrt(3), rel=1e-3)
    assert task_sd_at(0.3, 2, 8) == pytest.approx(0.15) and task_sd_at(0.3, 2, 8, sampling_share=0.0) == 0.3


@pytest.mark.failure_mode("F56")
def test_no_result_is_stated_without_the_effect_the_design_could_detect():
    with pytest.raises(PowerError, match="F56"):
        verdict(0.05, (-0.02, 0.12), None)
    assert verdict(0.05, (-0.02, 0.12), 0.09).startswith("no effect detected: +5.0%")
    assert "about 9.0 points" in verdict(0.05, (-0.02, 0.12), 0.09)
    assert verdict(0.2, (0.1, 0.3), 0.09).startswith("effect detected")
    assert verdict(0.2, (0.1, 0.3), 0.09, signs_agree=False).startswith("no effect detected")
    # a pooled comparison carries its own detectable effect, and its report states the verdict with it
    seeds = [planted(n_tasks=60, flip=0.2, seed=s) for s in (1, 2, 3)]
    p = pooled(seeds, a_arm="warm start", b_arm="GRPO")
    assert p.detectable is not None and 0.0 < p.detectable < 0.2
    assert "verdict: effect detected" in "\n".join(p.lines())
    # one seed (a planted underpowered report): no seed spread to size it by, so no verdict is stated
    one = pooled(seeds[:1])
    assert one.detectable is None and "verdict: none stated" in "\n".join(one.lines())
    with pytest.raises(PowerError):
        one.verdict()
    single_task = pooled([([rec("t0", "correct")], [rec("t0", "wrong")])] * 2)
    assert single_task.detectable is None


@pytest.mark.failure_mode("F58")
def test_crossed_components_recover_a_shared_task_effect_and_widen_the_detectable_effect():
    rng = np.random.default_rng(3)
    est = []
    for _ in range(20):
        shared = rng.normal(0, 0.3, size=200)
        d = 0.1 + rng.normal(0, 0.05, size=(30, 1)) + shared[None, :] + rng.normal(0, 0.2, size=(30, 200))
        est.append(Components.crossed(d))
    assert np.mean([c.shared_sd for c in est]) == pytest.approx(0.3, rel=0.05)
    assert np.mean([c.task_sd for c in est]) == pytest.approx(0.2, rel=0.02)
    assert np.mean([c.seed_sd for c in est]) == pytest.approx(0.05, rel=0.25)
    # the same data read as nested (each seed's tasks its own) hides the shared part in the within-seed
    # spread, which then shrinks with S: its detectable effect is too small
    d = 0.1 + rng.normal(0, 0.3, size=128)[None, :] + rng.normal(0, 0.2, size=(3, 128))
    crossed, nested = Components.crossed(d), Components.of(list(d))
    assert mde(crossed, seeds=3, tasks=128) > 1.3 * mde(nested, seeds=3, tasks=128)
    assert Components.crossed(d[:1]).shared_sd == pytest.approx(float(d[0].std(ddof=1)))
    with pytest.raises(PowerError, match="complete"):
        Components.crossed(np.array([[0.1, np.nan], [0.2, 0.3]]))
