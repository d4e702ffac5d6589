"""A black-box rollout as a Harbor run: opencode as a Harbor agent (`dagent.harbor.agent`) in
dagent's Harbor provider, pointed at a capture session through the socket bridge, Harbor's
separate verifier (dagent's grader) deciding; then the same rollout consumed by TRL's loop-owning
harness worker, the black-box trainer's rollout path (one training row with its masks and the
engine's own logprobs). The steered tiny Qwen3 (benchmarks/rollouts.py) counts the rows of the
demo table with two tool calls.

Not covered: an optimizer step on these rows (tests/envs/test_trl_grpo.py covers TRL's trainer on
the white-box loop); Harbor's own installed agents (they download themselves at set-up).
"""

from __future__ import annotations

import functools
import pickle
import threading
from types import SimpleNamespace

import pytest

from dagent.core.reward import reward
from dagent.envs.blackbox_server import create_app
from dagent.harbor.export import export_harbor
from dagent.harbor.job import harbor_binary
from dagent.harness.opencode import OpencodeConfig
from dagent.runtime.blackbox import BlackBoxRuntime
from tests.envs.test_blackbox import assert_exact_chain, need_opencode
from tests.factories import LiveServer

pytestmark = [pytest.mark.harbor, pytest.mark.harness, pytest.mark.slow]
try:
    harbor_binary()
except Exception as e:  # noqa: BLE001 - the reason is the skip message
    pytest.skip(str(e), allow_module_level=True)

CONFIG = OpencodeConfig(model="tiny-qwen3-steered", max_output_tokens=256)


@pytest.fixture(scope="module")
def runtime(suite, tmp_path_factory):
    need_opencode()
    import torch

    from benchmarks.rollouts import steered_engine

    torch.set_num_threads(1)
    catalog = tmp_path_factory.mktemp("harbor") / "train"
    export_harbor(suite, "train", catalog)
    engine = steered_engine()
    rt = BlackBoxRuntime(
        suite, engine.url, model="tiny-qwen3-steered", opencode=CONFIG, timeout_s=300, harbor_catalog=catalog
    ).start()
    yield rt
    rt.stop()
    engine.stop()


@pytest.mark.failure_mode("F03")
def test_an_opencode_rollout_through_harbor_and_capture_is_graded_by_the_verifier(runtime):
    r = runtime.run_rollout("train", 0)
    assert (r.outcome, r.answer, r.cause) == ("correct", "3\n", None), r.summary()
    harbor = r.metadata["harbor"]
    assert harbor["error"] is None and harbor["verifier"]["method"] == "exact" and harbor["grader_agrees"]
    assert r.tool_calls == 2 == r.metadata["opencode"]["tool_uses"]  # counted from the capture (F34)
    assert r.reward == reward(True, 2)
    assert_exact_chain(r)
    assert r.trajectory.stats.auxiliary_roots == 1 and r.gate.tier == "train"
    assert not [f for f in r.findings if f.level == "fatal"]


def test_a_wrong_answer_through_harbor_is_zero_not_none(runtime):
    r = runtime.run_rollout("train", 1)  # a sum is asked; the steered policy writes the row count
    assert (r.outcome, r.reward, r.correct, r.cause) == ("wrong", 0.0, False, None), r.summary()


@pytest.mark.failure_mode("F05")
def test_trls_harness_worker_trains_on_a_harbor_rollout(runtime, suite):
    pytest.importorskip("trl")
    from openenv.core.harness.capture.upstream import training_sampling
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    from dagent.envs.blackbox_session import BlackBoxSessionFactory

    server = LiveServer(create_app(runtime))
    try:
        factory = pickle.loads(pickle.dumps(functools.partial(BlackBoxSessionFactory, server.url, split="train")))
        made = factory(sampling=training_sampling({"temperature": 1.0}))
        loop = SimpleNamespace(
            _factory=made,
            _stop_event=threading.Event(),
            _adapter=None,
            _rollout_reward_fn=None,
            _fork_threshold_tokens=0,
            _live_sessions=set(),
        )
        prompt = suite.prompt_rows("train")[0]["prompt"]
        (completion, ids, sequences, n_tools, n_failed, env_reward), metrics = _HarnessRolloutLoop._run_session(
            loop, prompt, 0
        )
    finally:
        server.stop()
    assert env_reward == reward(True, 2) and n_tools == 2 and n_failed == 0
    (row,) = sequences  # one conversation, one training row
    assert len(row.input_ids) == len(row.completion_mask) == len(row.old_log_probs)
    assert sum(row.completion_mask) == len(ids) > 0  # every sampled agent token trains, nothing else
