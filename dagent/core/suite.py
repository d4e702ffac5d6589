"""A task suite: named splits, optional tier filters, deduplicated prompts and curricula.

Split names are `train`, `test`, `eval`, each with at most one tier suffix (`train:easy`). The
index inside a (possibly tiered) split is the task's identity in that split: a dataset row
carries `split` and `index`, and resolving a row or a prompt back to a task goes through
`task_at` / `resolve_prompt` exactly as rollout creation does (F12, F13).

Instructions are unique within the suite: `dedupe` keeps the first occurrence and counts
conflicting golds (F11), so resolving a prompt text can never pick another task's gold.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagent.core.task import TIERS, Task
from dagent.errors import SplitError

BASE_SPLITS: tuple[str, ...] = ("train", "test", "eval")


@dataclass(frozen=True)
class SplitName:
    """A parsed split name: a base split and at most one tier."""

    base: str
    tier: str | None = None

    def __str__(self) -> str:
        return self.base if self.tier is None else f"{self.base}:{self.tier}"


def valid_split_names(bases: Iterable[str] = BASE_SPLITS) -> list[str]:
    """Every accepted name: each base, then each base with one tier."""
    names: list[str] = []
    for base in bases:
        names.append(base)
        names.extend(f"{base}:{tier}" for tier in TIERS)
    return names


def parse_split(name: str, bases: Sequence[str] = BASE_SPLITS) -> SplitName:
    """Parse `base` or `base:tier`; anything else fails listing the valid names (F13)."""
    parts = str(name).strip().split(":")
    ok = len(parts) in (1, 2) and parts[0] in bases and (len(parts) == 1 or parts[1] in TIERS)
    if not ok:
        raise SplitError(f"unknown split {name!r}; valid splits: {', '.join(valid_split_names(bases))}")
    return SplitName(parts[0], parts[1] if len(parts) == 2 else None)


@dataclass(frozen=True)
class DedupReport:
    """What deduplicating instructions removed (F11)."""

    tasks_in: int
    tasks_out: int
    duplicate_instructions: int  # distinct instructions that occurred more than once
    dropped_tasks: int
    conflicting_golds: int  # of the duplicated instructions, how many had differing golds
    conflicts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (instruction, golds) examples

    def summary(self) -> str:
        return (
            f"{self.tasks_in} tasks -> {self.tasks_out} unique instructions; "
            f"{self.duplicate_instructions} instructions shared by {self.dropped_tasks} dropped "
            f"tasks; {self.conflicting_golds} with conflicting golds"
        )


def dedupe(tasks: Sequence[Task]) -> tuple[list[Task], DedupReport]:
    """Keep the first task of each instruction; count duplicates and conflicting golds."""
    first: dict[str, Task] = {}
    golds: dict[str, list[str]] = {}
    for task in tasks:
        golds.setdefault(task.instruction, []).append(task.gold)
        first.setdefault(task.instruction, task)
    kept = list(first.values())
    shared = {ins: g for ins, g in golds.items() if len(g) > 1}
    conflicts = tuple((ins, tuple(dict.fromkeys(g))) for ins, g in shared.items() if len(set(g)) > 1)
    return kept, DedupReport(
        tasks_in=len(tasks),
        tasks_out=len(kept),
        duplicate_instructions=len(shared),
        dropped_tasks=len(tasks) - len(kept),
        conflicting_golds=len(conflicts),
        conflicts=conflicts[:20],
    )


@dataclass(frozen=True)
class Curriculum:
    """`warmup:N`: N easy prompts first, then medium with hard spread evenly through."""

    warmup: int

    @staticmethod
    def parse(spec: str | None) -> Curriculum | None:
        if spec is None or spec in ("", "none", "shuffle"):
            return None
        kind, _, n = spec.partition(":")
        if kind != "warmup" or not n.isdigit():
            raise SplitError(f"unknown curriculum {spec!r}; use 'warmup:N' (e.g. warmup:125) or none")
        return Curriculum(int(n))


def _spread(lists: Sequence[Sequence[int]]) -> list[int]:
    """Merge lists so each is spread evenly through the result (stable, deterministic)."""
    keyed = [((i + 0.5) / len(items), order, item) for order, items in enumerate(lists) for i, item in enumerate(items)]
    return [item for _, _, item in sorted(keyed)]


@dataclass
class TaskSuite:
    """Tasks by base split, plus where their tables live."""

    splits: Mapping[str, Sequence[Task]]
    tables_root: Path
    source: str = "local"
    _index: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    #: How a table named by URL (`hf://buckets/...`, a suite pushed with `--bucket`) reaches this
    #: host: `url -> {base name: local path}`; set by `dagent.suites.sources.read_suite` (bucket staging).
    remote_files: Callable[[str], dict[str, Path]] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for base, tasks in self.splits.items():
            seen: dict[str, int] = {}
            for i, task in enumerate(tasks):
                if task.instruction in seen:
                    raise SplitError(
                        f"split {base!r} holds the instruction of task {tasks[seen[task.instruction]].task_id} "
                        f"twice (again in {task.task_id}); rebuild the suite, which deduplicates (F11)"
                    )
                seen[task.instruction] = i
            self._index[base] = seen

    @property
    def bases(self) -> tuple[str, ...]:
        return tuple(self.splits)

    def split_names(self) -> list[str]:
        return valid_split_names(self.bases)

    def tasks(self, split: str) -> list[Task]:
        name = parse_split(split, self.bases)
        tasks = self.splits[name.base]
        if name.tier is None:
            return list(tasks)
        return [t for t in tasks if t.difficulty_tier == name.tier]

    def task_at(self, split: str, index: int) -> Task:
        """The full task a row (`split`, `index`) names; out of range names the valid range."""
        tasks = self.tasks(split)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(tasks):
            raise SplitError(f"index {index!r} is out of range for split {split!r}: valid 0..{len(tasks) - 1}")
        return tasks[index]

    def resolve_prompt(self, split: str, instruction: str) -> tuple[int, Task]:
        """Resolve a prompt's text back to (index, task) within `split`, as a rollout does."""
        for index, task in enumerate(self.tasks(split)):
            if task.instruction == instruction:
                return index, task
        raise SplitError(f"no task in split {split!r} has that instruction")

    def files_for(self, task: Task) -> dict[str, Path]:
        """The host files to stage for `task`: /workdir/input/<basename> -> tables_root/<path>, or
        for a table named by URL, the file `remote_files` brought to this host."""
        out: dict[str, Path] = {}
        for f in task.data_files:
            if "://" in f:
                if self.remote_files is None:
                    raise SplitError(
                        f"task {task.task_id} names its table {f}, and this suite has no way to fetch it: "
                        "load it with dagent.suites.sources.load_tasks"
                    )
                out.update(self.remote_files(f))
            else:
                out[Path(f).name] = self.tables_root / f
        return out

    def find(self, task_id: str) -> tuple[str, int, Task]:
        """Locate a task id: (base split, index, task)."""
        for base, tasks in self.splits.items():
            for i, task in enumerate(tasks):
                if task.task_id == task_id:
                    return base, i, task
        raise SplitError(f"no task {task_id!r} in this suite; `dagent tasks list` shows the ids")

    def prompt_rows(self, split: str, curriculum: str | None = None, seed: int = 0) -> list[dict]:
        """Dataset rows for a trainer: the prompt plus the (`split`, `index`) that names the task.

        Without a curriculum the rows are in split order. With `warmup:N` the rows are N easy
        tasks, then the medium tasks with the hard ones spread through them (remaining easy
        tasks are left out, as in the reference run). Tiers are read off the resolved tasks,
        never from a text lookup (F12). A curriculum on a tiered split (`train:easy`) is refused:
        it would silently shrink the split to its warm-up (F48).
        """
        tasks = self.tasks(split)
        order = list(range(len(tasks)))
        plan = Curriculum.parse(curriculum)
        if plan is not None and ":" in split:
            raise SplitError(
                f"curriculum {curriculum!r} on the tiered split {split!r} would keep {min(plan.warmup, len(tasks))} "
                "of its "
                f"{len(tasks)} tasks and nothing after the warm-up (a tiered split has no other tier to follow it): "
                f"give the untiered split ({split.split(':')[0]}) with the curriculum, or no curriculum (F48)"
            )
        if plan is not None:
            rng = random.Random(seed)
            by_tier = {tier: [i for i in order if tasks[i].difficulty_tier == tier] for tier in TIERS}
            for items in by_tier.values():
                rng.shuffle(items)
            if plan.warmup > len(by_tier["easy"]):
                raise SplitError(
                    f"warmup:{plan.warmup} asks for more easy tasks than split {split!r} has ({len(by_tier['easy'])})"
                )
            order = by_tier["easy"][: plan.warmup] + _spread([by_tier["medium"], by_tier["hard"]])
        return [
            {
                "prompt": [{"role": "user", "content": tasks[i].instruction}],
                "split": split,
                "index": i,
                "task_id": tasks[i].task_id,
                "difficulty_tier": tasks[i].difficulty_tier,
            }
            for i in order
        ]
