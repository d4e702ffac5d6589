"""Check a documentation move lost nothing: every table row, every command line of a fenced block
and every paragraph line that holds a figure in README.md at REV is found, word for word, in
README.md or docs/*.md of the working tree. Prints what is missing; exits 1 if anything is.

    python scripts/docs_moved.py 119e3b1        # README as it was at that commit
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checked_lines(text: str) -> list[str]:
    """Table rows, lines inside fenced blocks, and prose lines with a number in them."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if fenced or s.startswith("|") or re.search(r"\d", s):
            out.append(s)
    return out


def main(rev: str) -> int:
    before = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:README.md"], capture_output=True, text=True, check=True
    ).stdout
    after = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    now = {line.strip() for line in after.splitlines()}
    lines = checked_lines(before)
    missing = [line for line in lines if line not in now and line not in after]
    for line in missing:
        print(f"missing: {line}")
    print(
        f"{len(lines) - len(missing)} of {len(lines)} lines of README.md at {rev} (table rows, commands, "
        "lines with figures) are in README.md or docs/*.md now"
    )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
