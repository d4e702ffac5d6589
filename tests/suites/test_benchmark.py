"""The suite as a Hub Benchmark and results that link to it, round trip through the real `HfApi`
over real HTTP (tests/fake_hub.py): push a suite (its eval.yaml declares the held-out splits and
tiers), evaluate it from the Hub, push the results, then read the model repo back with
huggingface_hub's own parser: every entry names the pushed dataset repo, the revision evaluated and
a task its eval.yaml declares. A wrong task id or a dataset id that is no repo is refused before
anything is pushed. Not covered: the real Hub's validation of eval.yaml and its leaderboards."""

from __future__ import annotations

import pytest
import yaml
from huggingface_hub import HfApi, parse_eval_result_entries

from dagent.core.outcome import EvalRecord
from dagent.errors import ConfigError
from dagent.eval.args import EvalArgs
from dagent.eval.experiment import Arm, benchmark_entries, run_experiment
from dagent.eval.hub import eval_result_entries
from dagent.eval.scoring import task_scores
from dagent.suites.benchmark import BENCHMARK_FILE, declared_task_ids, hub_reference, task_ids, tier_config
from dagent.suites.push import push_suite
from dagent.suites.sources import load_tasks
from tests.engine.test_hub_models import hub_env
from tests.fake_hub import FakeHub

# Inspect AI's HFTask (inspect_ai/_eval/task/hf.py), the schema `inspect eval hf/OWNER/NAME` and the
# Hub validate each task of an eval.yaml against: these keys and no others
TASK_KEYS = {"id", "config", "split", "field_spec", "shuffle_choices", "epochs", "epoch_reducer", "solvers", "scorers"}
SOLVERS = {
    "prompt_template",
    "system_message",
    "user_message",
    "chain_of_thought",
    "use_tools",
    "generate",
    "self_critique",
    "multiple_choice",
}
SCORERS = {
    "includes",
    "match",
    "pattern",
    "answer",
    "exact",
    "f1",
    "model_graded_qa",
    "model_graded_fact",
    "choice",
    "math",
}
RECORD = EvalRecord(
    task_id="demo.t100",
    split="test",
    index=0,
    difficulty_tier="easy",
    agent="tools",
    outcome="correct",
    reward=1.0,
    correct=True,
    method="exact",
)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory, suite_dir):
    with FakeHub() as hub, hub_env(hub, tmp_path_factory.mktemp("hf")):
        api = HfApi(endpoint=hub.url, token=hub.token)
        result = push_suite(suite_dir, "fake-user/bench", api=api, echo=lambda _l: None)
        yield hub, api, result


def test_a_pushed_suite_declares_its_held_out_splits_and_tiers_as_benchmark_tasks(pushed):
    hub, _, result = pushed
    files = hub.files("fake-user/bench", "dataset")
    doc = yaml.safe_load(files[BENCHMARK_FILE])
    ids = [t["id"] for t in doc["tasks"]]
    assert ids == result["tasks"] == ["test", "test:easy", "test:medium", "eval", "eval:easy", "eval:medium"]
    for task in doc["tasks"]:
        assert set(task) <= TASK_KEYS and task["field_spec"]["input"] == "instruction"
        assert {s["name"] for s in task["solvers"]} <= SOLVERS and {s["name"] for s in task["scorers"]} <= SCORERS
    assert "pass@1 over graded tasks" in doc["metric"]
    card = files["README.md"].decode()
    for tid in ids[1:]:
        if ":" in tid:  # each tier reads exactly its tasks, as its own config
            assert f"config_name: {tier_config(tid)}" in card and f"tiers/{tier_config(tid)}.parquet" in files
    import io

    import pyarrow.parquet as pq

    easy = pq.read_table(io.BytesIO(files["tiers/test_easy.parquet"])).to_pylist()
    assert easy and {r["difficulty_tier"] for r in easy} == {"easy"}


@pytest.mark.slow
def test_results_link_to_a_declared_task_of_the_benchmark_at_its_revision(pushed, tmp_path):
    hub, api, result = pushed
    suite = load_tasks("fake-user/bench", api=api)
    assert hub_reference(suite) == ("fake-user/bench", result["commit"])
    lines: list[str] = []
    run_experiment(
        suite,
        [Arm("oracle", agent="oracle")],
        tmp_path / "run",
        EvalArgs(split="test:easy", push_to="fake-user/model"),
        api=api,
        echo=lines.append,
    )
    files = hub.files("fake-user/model")
    declared = declared_task_ids(hub.files("fake-user/bench", "dataset")[BENCHMARK_FILE].decode())
    yamls = [p for p in files if p.startswith(".eval_results/")]
    assert yamls
    for path in yamls:
        for entry in parse_eval_result_entries(yaml.safe_load(files[path])):
            assert (entry.dataset_id, entry.dataset_revision) == ("fake-user/bench", result["commit"])
            assert entry.task_id == "test:easy" and entry.task_id in declared
            assert 0.0 <= entry.value <= 1.0 and "95% CI" in entry.notes and "excluded (ungraded)" in entry.notes


def test_a_wrong_task_or_a_dataset_that_is_no_repo_is_refused_before_any_push(pushed, tmp_path):
    hub, api, _ = pushed
    suite = load_tasks("fake-user/bench", api=api)
    scores = {"a": task_scores([RECORD], (1,), arm="a")}
    before = set(hub.repos)
    with pytest.raises(ConfigError, match="'train' is not declared"):
        benchmark_entries(suite, "train", scores, [Arm("a")], api=api)
    for bad in ("hf://datasets/fake-user/bench", "datasets/fake-user/bench"):
        with pytest.raises(ConfigError, match="not a Hub dataset repo id"):
            eval_result_entries({"a": 0.5}, dataset_id=bad, task_id="test", notes=None)
    assert set(hub.repos) == before  # nothing was created or pushed


def test_a_local_suite_says_its_results_cannot_link(suite, tmp_path):
    lines: list[str] = []
    assert (
        benchmark_entries(suite, "test", {"a": task_scores([RECORD], (1,), arm="a")}, [Arm("a")], echo=lines.append)
        == {}
    )
    assert "cannot be linked" in lines[0] and "dagent suite push" in lines[0]
    assert task_ids(suite)[0] == "test"
