from dagent.trajectory.linking import CLEAN, FORK, REALIGN, common_prefix_len, link_turns, measure_drift
from dagent.trajectory.turn import CapturedTurn


def turn(i, prompt, completion):
    return CapturedTurn(f"t{i}", "s", i, prompt, completion, [-0.1] * len(completion), tools_offered=1)


def test_common_prefix_len_stops_at_the_first_difference():
    assert common_prefix_len([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix_len(list(range(1000)), list(range(1000))) == 1000
    assert common_prefix_len([], [1]) == 0


def test_an_appending_prompt_is_clean_with_zero_drift():
    assert measure_drift([1, 2], [3, 4], [1, 2, 3, 4, 5], 8) == (CLEAN, 0, 4)


def test_drift_inside_the_completion_realigns_below_the_threshold_and_forks_above():
    # held 1 2 | 3 4 5 6; the next prompt keeps 1 2 3 then differs: 3 tokens drifted
    assert measure_drift([1, 2], [3, 4, 5, 6], [1, 2, 3, 9, 9], 8) == (REALIGN, 3, 3)
    assert measure_drift([1, 2], [3, 4, 5, 6], [1, 2, 3, 9, 9], 3)[0] == FORK  # strict <, as TRL
    # a difference inside the held PROMPT is never a realign
    assert measure_drift([1, 2, 3], [4], [1, 9, 3, 4], 100)[0] == FORK


def test_link_turns_finds_each_parent_by_prefix_and_leaves_strangers_as_roots():
    turns = [turn(0, [1, 2], [3]), turn(1, [1, 2, 3, 4], [5]), turn(2, [7, 7], [8]), turn(3, [1, 2, 3, 4, 5, 6], [9])]
    parent, links = link_turns(turns, [False] * 4, 8)
    assert parent == [-1, 0, -1, 1]
    assert [l.kind if l else None for l in links] == [None, CLEAN, None, CLEAN]


def test_auxiliary_turns_never_link_to_agent_turns():
    turns = [turn(0, [1, 2], [3]), turn(1, [1, 2, 3, 4], [5])]
    parent, _ = link_turns(turns, [False, True], 8)  # same tokens, different universes
    assert parent == [-1, -1]
