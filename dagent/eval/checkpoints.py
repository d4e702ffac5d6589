"""Checkpoints as a trainer writes them: `checkpoint-N` folders in a local directory or a Hub model
repo, listed, fetched, and watched as they appear, so `dagent eval watch` evaluates each one.

Invariant (tests/eval/test_experiment.py): a checkpoint source that does not exist, or that shows no
`checkpoint-N` within the deadline, fails loudly rather than reporting "no checkpoints yet" forever
(F42).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dagent.errors import DagentError

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class WatchError(DagentError):
    """The checkpoint source is missing or produced no checkpoint in time (F42)."""


def is_hub_repo(source: str | Path) -> bool:
    """`OWNER/NAME` that is not a local path (relative, absolute or home-anchored, or existing)."""
    s = str(source)
    return (
        s.count("/") == 1
        and not s.startswith((".", "/", "~"))
        and not s.endswith("/")
        and not Path(s).expanduser().exists()
    )


def checkpoints(source: str | Path, *, api: Any = None) -> dict[int, str]:
    """`checkpoint-N` -> where it is: the sub-directories of a local directory, or the folders of a
    Hub model repo (`OWNER/NAME`). A local path that does not exist is an error (F42)."""
    path = Path(source).expanduser()
    if not is_hub_repo(source):
        if not path.is_dir():
            raise WatchError(
                f"checkpoint directory {path} does not exist: point --watch at the trainer's "
                "output_dir (where checkpoint-N/ folders appear) or a Hub repo id (F42)"
            )
        return {int(m.group(1)): str(p) for p in path.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))}
    from huggingface_hub import HfApi

    api = api or HfApi()
    try:
        entries = api.list_repo_tree(str(source), recursive=False)
    except Exception as e:  # noqa: BLE001 - a foreign error, wrapped once with the fix
        raise WatchError(f"could not list Hub repo {source!r}: {e}; check the repo id and HF_TOKEN (F42)") from e
    return {int(m.group(1)): f"{source}:{e.path}" for e in entries if (m := CHECKPOINT.match(getattr(e, "path", "")))}


def fetch_checkpoint(where: str, cache: Path, *, api: Any = None) -> str:
    """A local directory for a checkpoint from `checkpoints()` (Hub ones are downloaded)."""
    if ":" not in where or Path(where).exists():
        return where
    from huggingface_hub import snapshot_download

    repo, folder = where.split(":", 1)
    root = snapshot_download(repo, allow_patterns=[f"{folder}/*"], local_dir=cache / repo.replace("/", "--"))
    return str(Path(root) / folder)


def watch(
    source: str | Path,
    *,
    deadline_s: float,
    poll_s: float = 30.0,
    max_checkpoints: int | None = None,
    api: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[tuple[int, str]]:
    """Yield each new `(step, where)` as it appears, oldest first. Ends after `max_checkpoints`, or
    when nothing new appeared for `deadline_s` after at least one; raises WatchError when the
    source is missing or shows no checkpoint at all within `deadline_s` (F42)."""
    seen: set[int] = set()
    last_new = clock()
    while True:
        found = checkpoints(source, api=api)
        for step in sorted(set(found) - seen):
            seen.add(step)
            last_new = clock()
            yield step, found[step]
            if max_checkpoints is not None and len(seen) >= max_checkpoints:
                return
        if clock() - last_new >= deadline_s:
            if not seen:
                raise WatchError(
                    f"no checkpoint-N appeared in {source} within {deadline_s:.0f}s: is the "
                    "trainer writing there (save_steps, output_dir)? (F42)"
                )
            return
        sleep(poll_s)
