import json
import random

import pytest

from dagent.core.outcome import EvalRecord, summarize
from dagent.errors import ConfigError, DagentError
from dagent.eval.report import PLOTS, load_records, recorded_conditions, require_same_conditions, write_results
from dagent.harness.play import write_records


def rec(i, outcome, *, agent="tools", model="m", sample=0, cause=None, tool_calls=5, note=""):
    reward = {"correct": 1.15, "wrong": 0.0, "ungraded": None}[outcome]
    correct = {"correct": True, "wrong": False, "ungraded": None}[outcome]
    return EvalRecord(
        task_id=f"t{i}",
        split="test",
        index=i,
        difficulty_tier=("easy", "medium", "hard")[i % 3],
        agent=agent,
        model=model,
        sample=sample,
        outcome=outcome,
        reward=reward,
        correct=correct,
        method="ungraded" if outcome == "ungraded" else "numeric",
        note=note,
        cause=cause,
        answer=None if outcome == "ungraded" else "7",
        tool_calls=tool_calls,
    )


def arm(p, seed, model, n=60, oom=()):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i in oom:
            out.append(rec(i, "ungraded", model=model, cause="sandbox_oom", tool_calls=rng.randint(0, 30)))
        elif rng.random() < p:
            out.append(rec(i, "correct", model=model, tool_calls=rng.randint(0, 30)))
        else:
            out.append(
                rec(
                    i,
                    "wrong",
                    model=model,
                    tool_calls=rng.randint(0, 30),
                    note=rng.choice(["no answer file was written", "8 is outside tolerance (atol=0, rtol=0)"]),
                )
            )
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("results")
    arms = {"base": arm(0.3, 1, "base", oom={2, 5}), "ckpt-100": arm(0.6, 2, "ckpt-100", oom={7})}
    return out, write_results(out, arms, k_values=(1,), baseline="base", title="planted", step_cap=30)


def test_write_results_writes_the_markdown_and_four_plots(written):
    out, paths = written
    assert [p.name for p in paths] == ["results.md", *PLOTS]
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, name


@pytest.mark.failure_mode("F24")
def test_results_state_exclusions_before_the_first_score(written):
    lines = (written[0] / "results.md").read_text().splitlines()
    exclusion = next(i for i, line in enumerate(lines) if "sandbox_oom" in line)
    first_score = next(i for i, line in enumerate(lines) if "%" in line)
    assert exclusion < first_score
    assert any(line.startswith("- base: 2 of 60 tasks excluded (sandbox_oom 2)") for line in lines)


def test_results_hold_the_paired_row_against_the_baseline(written):
    text = (written[0] / "results.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| ckpt-100 | 60 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:6] == ["sandbox_oom 2", "sandbox_oom 1", "0", "57"]  # excluded, then paired count
    assert "## Wrong answers by category" in text and "no_answer" in text and "outside_tolerance" in text
    assert "step cap" in text


def test_an_unknown_baseline_is_refused_with_the_arm_names(tmp_path):
    with pytest.raises(ConfigError, match="ckpt"):
        write_results(tmp_path, {"ckpt": arm(0.5, 3, "c")}, baseline="base")


def test_an_arm_with_nothing_graded_still_plots_and_reports_n_a(tmp_path):
    pytest.importorskip("matplotlib")
    arms = {
        "oracle": [rec(i, "correct", agent="oracle", model=None, tool_calls=None) for i in range(6)],
        "broken": [rec(i, "ungraded", cause="engine_unreachable") for i in range(6)],
    }
    paths = write_results(tmp_path, arms, k_values=(1, 2), baseline="oracle")
    text = (tmp_path / "results.md").read_text()
    assert "| broken | all | 6 | 0 | 6 (engine_unreachable 6) | n/a |" in text
    assert "| broken | 6 | none | engine_unreachable 6 | 0 | 0 |" in text
    assert all(p.stat().st_size > 5_000 for p in paths[1:])


def test_load_records_reads_what_write_records_wrote(tmp_path):
    records = arm(0.5, 4, "m", n=9, oom={1})
    write_records(tmp_path, records, summarize(records))
    assert load_records(tmp_path) == records
    assert load_records(tmp_path / "records.jsonl") == records


def test_load_records_names_the_missing_path(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path / "nope" / "records.jsonl").replace("\\", "\\\\")):
        load_records(tmp_path / "nope")


def test_load_records_names_the_bad_line(tmp_path):
    (tmp_path / "records.jsonl").write_text(rec(0, "correct").model_dump_json() + '\n{"task_id": 1}\n')
    with pytest.raises(ConfigError, match="line 2"):
        load_records(tmp_path)


def test_each_arm_is_measured_against_its_own_agents_step_cap(tmp_path):
    """opencode's step limit (17, the black-box recipe's it trains under) is not the tool loop's budget
    (30): 17 calls is capped for one only."""
    pytest.importorskip("matplotlib")
    from dagent.recipes import Recipes

    caps = {
        name: Recipes.of("gpu").step_cap(agent)
        for name, agent in (("oc", "opencode"), ("tl", "tools"), ("or", "oracle"))
    }
    assert caps == {"oc": 17, "tl": 30, "or": None}
    assert Recipes.of("cpu").step_cap("tools") == 4  # the cpu preset's tool-iteration cap
    arms = {
        "oc": [rec(0, "wrong", agent="opencode", tool_calls=17), rec(1, "wrong", agent="opencode", tool_calls=3)],
        "tl": [rec(0, "wrong", tool_calls=17), rec(1, "wrong", tool_calls=30)],
        "or": [rec(0, "correct", agent="oracle", tool_calls=1), rec(1, "correct", agent="oracle", tool_calls=1)],
    }
    write_results(tmp_path, arms, step_cap=caps)
    line = next(x for x in (tmp_path / "results.md").read_text().splitlines() if "reached the step cap" in x)
    assert "oc 50.0% (cap 17)" in line and "tl 50.0% (cap 30)" in line and "or " not in line


def test_a_runs_out_folder_holding_one_arm_is_checked_by_its_arms_summary(tmp_path):
    """`dagent eval pool OUT_A OUT_B` passes the folders `dagent eval --out` wrote (OUT/<arm>/
    records.jsonl + summary.json): the conditions are read from the arm inside, not skipped (F47)."""
    for name, temperature in (("a", 0.8), ("b", 1.0)):
        arm = tmp_path / name / "final"
        arm.mkdir(parents=True)
        (arm / "records.jsonl").write_text("")
        (arm / "summary.json").write_text(json.dumps({"conditions": {"loop": "white-box", "temperature": temperature}}))
    assert recorded_conditions(tmp_path / "a")["temperature"] == 0.8
    with pytest.raises(DagentError, match="temperature"):
        require_same_conditions(tmp_path / "a", tmp_path / "b")
