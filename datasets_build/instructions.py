"""From a candidate to what the agent reads and what its sandbox needs.

An instruction names the input directory and each file, asks the question (with its rounding,
form, tie-break and missing-value rules) and says how to submit: "Write only the value to
/workdir/answer.txt." About a third also carry a backticked shell example of the submission, as
real instructions do, since that is what a harness once mangled by passing the text through a
double-quoted shell word (F19). The choice is a hash of the task id, so it is stable.

Sizing follows measured peaks (F18). The build runs each reference program in a sandbox with
room to spare (`measuring_room`, from the files' size), and next to them, once per set of staged
files, the naive program an agent starts with: read every file whole (`load_program`). It records
each one's peak resident set (the forked child's own, pandas included) and CPU time, and `sizing`
gives the task the smallest of 1, 2, 4 or 8 GB that holds `HEADROOM` times the larger of the two
peaks, and 2 CPUs when that is 2 GB or more or the reference program needed over 2 s of CPU. The
reference alone would undersize: it reads only the columns it needs from Parquet (flights: about
140 MB, against about 250 MB for the whole table). Measured here (2-core EPYC, pandas 3.1): small
tables peak at 69-135 MB and the largest others (Birthdays, 374k rows) at 172 MB, so 1 GB; the whole
flights table, alone or with a partner, at 246-254 MB, so 2 GB and 2 CPUs. The step edges (205, 410,
819 MB of peak at a headroom of 5) lie 16% or more from both clusters, so noise of a few MB never
moves a task across one and two builds stay byte-identical.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dagent.core.task import ANSWER_PATH, INPUT_DIR
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


MEMORY_STEPS_MB = (1024, 2048, 4096, 8192)
HEADROOM = 5.0
CPU_HEAVY_S = 2.0
LOAD_ID = "__load__"


def load_program(files: tuple[str, ...]) -> str:
    """What an agent runs first: every staged file read whole into pandas."""
    reads = [
        f"pd.read_parquet({INPUT_DIR + '/' + Path(f).name!r})"
        if f.endswith(".parquet")
        else f"pd.read_csv({INPUT_DIR + '/' + Path(f).name!r}, low_memory=False)"
        for f in files
    ]
    return "import pandas as pd\n\nframes = [" + ", ".join(reads) + "]\nprint(sum(len(f) for f in frames))\n"


def sizing(result: dict, load: dict | None = None) -> tuple[int, int]:
    """(cpus, memory_mb) for a task from its reference program's and the whole-file load's peaks."""
    peak = max(float(result.get("peak_rss_mb") or 0.0), float((load or {}).get("peak_rss_mb") or 0.0))
    need = HEADROOM * peak
    memory = next((m for m in MEMORY_STEPS_MB if m >= need), MEMORY_STEPS_MB[-1])
    cpus = 2 if memory >= 2048 or float(result.get("cpu_s") or 0.0) > CPU_HEAVY_S else 1
    return cpus, memory


def measuring_room(c: Candidate, tables_dir: Path) -> tuple[int, int]:
    """(cpus, memory_mb) of the sandbox a reference program is measured in: generous, from file sizes."""
    resident = sum((tables_dir / t.file).stat().st_size * (8 if t.fmt == "parquet" else 4) for t in c.tables)
    if resident > 20e6:
        return 2, 4096
    if resident > 1e6:
        return 1, 2048
    return 1, 1024
