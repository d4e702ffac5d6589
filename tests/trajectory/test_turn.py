from array import array

import pytest

from dagent.errors import DagentError
from dagent.trajectory.turn import CapturedTurn, Finding, token_ids


def test_token_ids_keep_an_array_and_convert_sequences():
    a = array("I", [1, 2, 3])
    assert token_ids(a) is a  # the store's own form is handed over, not copied
    assert token_ids([4, 5]) == array("I", [4, 5]) and token_ids(()) == array("I")


@pytest.mark.parametrize("bad", [[-1], [2**32], ["x"], [1.5]])
def test_token_ids_refuse_what_is_not_a_token_id(bad):
    with pytest.raises(DagentError, match="expected non-negative integer token ids"):
        token_ids(bad, "prompt")


def test_a_turn_normalises_its_fields():
    t = CapturedTurn("t0", "s", 0, [1, 2], None, [-0.5], messages=[{"role": "user", "content": "q"}])
    assert t.prompt_token_ids == array("I", [1, 2]) and t.completion_token_ids == array("I")
    assert t.logprobs == (-0.5,) and isinstance(t.messages, tuple)


def test_a_turn_refuses_a_negative_tool_count():
    with pytest.raises(DagentError, match="tools_offered"):
        CapturedTurn("t0", "s", 0, [1], [2], [-0.1], tools_offered=-1)


def test_openenv_trace_entries_round_trip_ids_and_reject_empty_logprobs():
    entry = {
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 4],
        "per_token_logps": [],
        "request": {"messages": [{"role": "user", "content": "q"}], "tools": [{"type": "function"}]},
        "response": {"choices": [{"finish_reason": "stop"}]},
        "metadata": {"node_id": "n1", "index": 4},
    }
    t = CapturedTurn.from_openenv(entry, session_id="s")
    assert (t.turn_id, t.seq, t.finish_reason, t.tools_offered) == ("n1", 4, "stop", 1)
    assert list(t.prompt_token_ids) == [1, 2] and list(t.completion_token_ids) == [3, 4]
    assert t.logprobs is None  # [] for a non-empty completion means rejected: reported, not zeros


def test_a_finding_prints_level_code_and_detail():
    assert str(Finding("fatal", "engine_error", "down")) == "[FATAL] engine_error: down"
