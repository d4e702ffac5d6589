"""`python -m datasets_build [--out DIR]`: build the task suite and print a short summary."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dagent.errors import DagentError


def main(argv: list[str] | None = None) -> int:
    from dagent.suites.sources import default_suite_dir

    parser = argparse.ArgumentParser(prog="python -m datasets_build", description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help=f"output directory (default: {default_suite_dir()})")
    args = parser.parse_args(argv)
    out = args.out or default_suite_dir()
    from datasets_build.build import build_suite

    last: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        step = max(total // 10, 1)
        if done == total or done // step != last.get(stage, -1):
            last[stage] = done // step
            print(f"  {stage}: {done}/{total}", file=sys.stderr, flush=True)

    started = time.monotonic()
    try:
        rep = build_suite(out, progress=progress)
    except DagentError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(
        f"Built {rep['totals']['all']} tasks from {len(rep['tables'])} tables "
        f"({len(rep['packages'])} packages) at {out} in {time.monotonic() - started:.1f}s"
    )
    for split, tiers in rep["counts"].items():
        print(f"  {split:<6} " + "  ".join(f"{t} {n}" for t, n in tiers.items()) + f"  (total {rep['totals'][split]})")
    print(f"  dropped {rep['dropped']['count']} of {rep['candidates']}: {rep['dropped']['by_reason']}")
    print(f"  dedup: {rep['dedup']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
