import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagent.core.reward import RewardConfig, reward


def test_formula_at_the_defaults():
    assert reward(True, 0) == pytest.approx(1.3)
    assert reward(True, 15) == pytest.approx(1.15)
    assert reward(False, 3) == 0.0
    assert reward(True, 7, RewardConfig(mode="correctness")) == 1.0


@pytest.mark.failure_mode("F32")
@pytest.mark.parametrize("mode", ["efficiency", "correctness"])
def test_ungraded_stays_none(mode):
    assert reward(None, 0, RewardConfig(mode=mode)) is None
    assert reward(None, 40, RewardConfig(mode=mode)) is None


@pytest.mark.failure_mode("F33")
@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_inaction_never_beats_a_real_attempt_and_correctness_dominates(n_fail, n_solve):
    idle_wrong = reward(False, 0)
    assert reward(False, n_fail) == idle_wrong == 0.0
    assert reward(True, n_solve) > reward(False, n_fail)
    assert reward(True, n_solve) >= 1.0


@given(st.integers(0, 1000))
def test_monotone_in_tool_calls(n):
    assert reward(True, n) >= reward(True, n + 1)


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="unknown reward mode"):
        RewardConfig(mode="additive")
    with pytest.raises(ValueError):
        RewardConfig(weight=1.5)
