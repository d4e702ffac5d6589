"""From a candidate to what the agent reads and what its sandbox needs.

An instruction names the input directory and each file, asks the question (with its rounding,
form, tie-break and missing-value rules) and says how to submit: "Write only the value to
/workdir/answer.txt." About a third also carry a backticked shell example of the submission, as
real instructions do, since that is what a harness once mangled by passing the text through a
double-quoted shell word (F19). The choice is a hash of the task id, so it is stable.

Sizing follows the data: pandas holds 3-5x a CSV's size (more for compressed Parquet), so small
tables get 1 CPU / 1 GB and the 336k-row flights table 2 CPUs / 4 GB (F18).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dagent.task import ANSWER_PATH, INPUT_DIR
from datasets_build.templates import Candidate

EXAMPLES = (
    f'(e.g. `echo -n "<value>" > {ANSWER_PATH}`)',
    f"(for example `printf '%s' \"<value>\" > {ANSWER_PATH}`)",
    f'(e.g. `echo "<answer>" > {ANSWER_PATH}`)',
)


def _h(task_id: str, salt: str) -> int:
    return int(hashlib.sha256(f"{salt}|{task_id}".encode()).hexdigest()[:8], 16)


def has_example(task_id: str) -> bool:
    return _h(task_id, "example") % 3 == 0


def render(c: Candidate) -> str:
    """The full instruction for a candidate."""
    if len(c.tables) == 1:
        t = c.tables[0]
        intro = f"The directory {INPUT_DIR}/ holds {t.basename}: {t.about}, one row per {t.row}."
    else:
        parts = [f"{t.basename} ({t.about}, one row per {t.row})" for t in c.tables]
        intro = f"The directory {INPUT_DIR}/ holds {', '.join(parts[:-1])} and {parts[-1]}."
    submit = f"Write only the value to {ANSWER_PATH}"
    if has_example(c.task_id):
        submit += " " + EXAMPLES[_h(c.task_id, "which") % len(EXAMPLES)]
    return f"{intro} {c.question} {submit}."


def sizing(c: Candidate, tables_dir: Path) -> tuple[int, int]:
    """(cpus, memory_mb) for a task from the size of its files."""
    resident = sum((tables_dir / t.file).stat().st_size * (8 if t.fmt == "parquet" else 4) for t in c.tables)
    if resident > 20e6:
        return 2, 4096
    if resident > 1e6:
        return 1, 2048
    return 1, 1024
