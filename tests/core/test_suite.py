from pathlib import Path

import pytest

from dagent.core.suite import TaskSuite, dedupe, parse_split, valid_split_names
from dagent.errors import SplitError
from tests.factories import make_task


def suite_of(levels_by_split):
    splits, i = {}, 0
    for split, levels in levels_by_split.items():
        tasks = []
        for level in levels:
            tasks.append(make_task(i, level=level))
            i += 1
        splits[split] = tasks
    return TaskSuite(splits=splits, tables_root=Path("/nonexistent"))


@pytest.mark.failure_mode("F13")
@pytest.mark.parametrize(
    "name", ["train:medium:easy", "train:easy:easy", "dev", "train:", ":easy", "train:trivial", "Train"]
)
def test_bad_split_names_fail_listing_valid_ones(name):
    with pytest.raises(SplitError) as e:
        parse_split(name)
    assert "train:easy" in str(e.value) and "eval:hard" in str(e.value)


@pytest.mark.failure_mode("F13")
def test_split_names_are_never_tiered_twice():
    names = valid_split_names()
    assert len(names) == 12
    assert all(n.count(":") <= 1 for n in names)
    for n in names:
        assert str(parse_split(n)) == n


def test_tiered_split_filters_and_indexes_within_the_filter():
    s = suite_of({"train": [1, 2, 1, 3], "test": [1], "eval": [2]})
    easy = s.tasks("train:easy")
    assert [t.difficulty_tier for t in easy] == ["easy", "easy"]
    assert s.task_at("train:easy", 1) is easy[1]
    with pytest.raises(SplitError, match=r"valid 0\.\.1"):
        s.task_at("train:easy", 2)
    with pytest.raises(SplitError):
        s.task_at("train", -1)


@pytest.mark.failure_mode("F11")
def test_dedupe_keeps_first_and_counts_conflicting_golds():
    a = make_task(0, instruction="same?", gold="1")
    b = make_task(1, instruction="same?", gold="2")
    c = make_task(2, instruction="same?", gold="1")
    d = make_task(3, instruction="other?", gold="5")
    e = make_task(4, instruction="other?", gold="5")
    kept, report = dedupe([a, b, c, d, e])
    assert kept == [a, d]
    assert report.duplicate_instructions == 2
    assert report.dropped_tasks == 3
    assert report.conflicting_golds == 1
    assert report.conflicts[0] == ("same?", ("1", "2"))


@pytest.mark.failure_mode("F11")
def test_a_suite_refuses_duplicate_instructions():
    with pytest.raises(SplitError, match="F11"):
        TaskSuite(
            splits={"train": [make_task(0, instruction="q"), make_task(1, instruction="q")]}, tables_root=Path(".")
        )


@pytest.mark.failure_mode("F12")
def test_warmup_curriculum_order_verified_by_resolving_each_prompt():
    levels = [1] * 30 + [2] * 40 + [3] * 10
    s = suite_of({"train": levels})
    rows = s.prompt_rows("train", curriculum="warmup:12", seed=3)
    # resolve every prompt back to its task exactly as rollout creation does: by split + index,
    # and by the prompt text; both must agree, and tiers are read off the resolved task.
    tiers = []
    for row in rows:
        task = s.task_at(row["split"], row["index"])
        index, by_text = s.resolve_prompt(row["split"], row["prompt"][0]["content"])
        assert by_text is task and index == row["index"]
        tiers.append(task.difficulty_tier)
    assert tiers[:12] == ["easy"] * 12
    rest = tiers[12:]
    assert set(rest) == {"medium", "hard"} and len(rest) == 50
    # hard is spread through, not bunched at either end
    hard_pos = [i for i, t in enumerate(rest) if t == "hard"]
    assert hard_pos[0] < 10 and hard_pos[-1] > 40
    gaps = [b - a for a, b in zip(hard_pos, hard_pos[1:])]
    assert max(gaps) <= 6
    # deterministic for a seed, different for another
    assert rows == s.prompt_rows("train", curriculum="warmup:12", seed=3)
    assert rows != s.prompt_rows("train", curriculum="warmup:12", seed=4)


@pytest.mark.failure_mode("F12")
def test_curriculum_does_not_degrade_into_a_shuffle_when_instructions_collide_across_tiers():
    # Two splits can share an instruction text; a raw text->tier lookup over the whole suite would
    # return the wrong tier. Resolution is per split, so the curriculum holds.
    s = TaskSuite(
        splits={
            "train": [
                make_task(0, level=1, instruction="q0"),
                make_task(1, level=2, instruction="q1"),
                make_task(2, level=3, instruction="q2"),
            ],
            "test": [make_task(3, level=3, instruction="q0")],
        },
        tables_root=Path("."),
    )
    rows = s.prompt_rows("train", curriculum="warmup:1")
    assert s.task_at("train", rows[0]["index"]).difficulty_tier == "easy"
    assert s.resolve_prompt("train", rows[0]["prompt"][0]["content"])[1].difficulty_tier == "easy"


def test_curriculum_errors_are_named():
    s = suite_of({"train": [1, 2]})
    with pytest.raises(SplitError, match="warmup:N"):
        s.prompt_rows("train", curriculum="easyfirst")
    with pytest.raises(SplitError, match="more easy tasks"):
        s.prompt_rows("train", curriculum="warmup:5")
    assert [r["index"] for r in s.prompt_rows("train")] == [0, 1]


@pytest.mark.failure_mode("F48")
def test_a_curriculum_on_a_tiered_split_is_refused_instead_of_shrinking_it():
    s = suite_of({"train": [1] * 6 + [2] * 4 + [3] * 2})
    assert len(s.prompt_rows("train:easy")) == len(s.tasks("train:easy"))  # the tiered split whole, no curriculum
    with pytest.raises(SplitError, match=r"tiered split 'train:easy'.*give the untiered split \(train\).*F48"):
        s.prompt_rows("train:easy", curriculum="warmup:2")
    assert len(s.prompt_rows("train", curriculum="warmup:2")) > 2  # the untiered split: the other tiers follow
