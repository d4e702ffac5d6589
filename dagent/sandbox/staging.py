"""Getting a task's tables into a sandbox's `/workdir/input`.

Local files are the default: `Sandbox.stage({name: host_path})`. Remote backends (E2B, HF) share
`stage_remote`: upload every file, then list `/workdir/input` inside the sandbox and compare, and
do the whole thing once more if anything failed (5 of 6 hard failures in 13,200 trials were one
transient 60 s stream timeout during staging).

Tables can also come from a Hub bucket prefix, `hf://buckets/OWNER/NAME/PREFIX`. They are
downloaded ON THIS HOST into a cache directory, flattened to their base names at download time,
then staged like any local file. Chosen over a download command inside the sandbox because: one
code path for every backend; retries, backoff and the two distinct errors below are tested here
rather than in a shell script; HF_TOKEN never has to enter the sandbox; and the cache serves every
rollout of the same task (a group of 8 lists the bucket once, not 8 times). The cost is a second
hop (bucket -> host -> sandbox) for remote backends.

Invariants (tests/sandbox/test_staging.py, F21): a transient error (HTTP 5xx, 408, 429, or an
error with no HTTP status: timeouts, connection resets) is retried, 4 attempts with linear
backoff; a client error (401/403/404) fails at once, naming HF_TOKEN's presence; an empty listing
raises `StagingError("nothing at prefix ...")`; files listed but none arriving (or none in the
sandbox after upload) raises `StagingError("directory empty: ...")`. Never an empty input
directory handed to an agent, whose failure would read as a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dagent.errors import ConfigError, DagentError, SandboxError, StagingError
from dagent.sandbox import describe_secrets
from dagent.sandbox.base import INPUT_DIR, Sandbox

__all__ = [
    "BUCKET_SCHEME",
    "BucketPrefix",
    "check_inputs",
    "fetch_bucket",
    "is_transient",
    "stage_bucket",
    "stage_remote",
]

_LOG = logging.getLogger(__name__)
_T = TypeVar("_T")
BUCKET_SCHEME = "hf://buckets/"
_MANIFEST = ".dagent-manifest.json"  # written last inside the download dir: a complete cache entry


def check_inputs(files: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """Validate names (relative, inside the input dir) and host files; never an empty set."""
    items = []
    for name, src in files.items():
        rel = posixpath.normpath(name) if name else ""
        if not rel or rel == "." or rel.startswith(("/", "..")):
            raise StagingError(f"input name {name!r} must be a relative path inside {INPUT_DIR}")
        if not Path(src).is_file():
            raise StagingError(f"input file {name!r} not found on the host (or not a regular file): {src}")
        items.append((rel, Path(src)))
    if not items:
        raise StagingError(f"directory empty: no input files were given to stage into {INPUT_DIR}")
    return items


def stage_remote(
    sandbox: Sandbox,
    files: Mapping[str, Path],
    upload: Callable[[Path, str], None],
    *,
    attempts: int = 2,
    timeout_s: float = 600.0,
) -> None:
    """Upload `files` into the sandbox's input dir and check they are all there; retried once.

    `upload(host_path, sandbox_path)` raises `SandboxError` on failure (the backend wraps its SDK).
    """
    items = check_inputs(files)
    expected = {rel for rel, _ in items}
    problem, found = "", set()
    for attempt in range(1, attempts + 1):
        try:
            for rel, src in items:
                upload(src, f"{INPUT_DIR}/{rel}")
            listed = sandbox.exec(f"cd {INPUT_DIR} && find . -type f", timeout_s=timeout_s)
        except StagingError:
            raise
        except SandboxError as e:
            problem = f"upload failed: {e}"
        else:
            if listed.ok:
                found = {line[2:] for line in listed.stdout.splitlines() if line.startswith("./")}
                missing = sorted(expected - found)
                if not missing:
                    return
                problem = f"{len(missing)} of {len(expected)} file(s) missing: {', '.join(missing[:5])}"
            else:
                problem = f"listing {INPUT_DIR} failed ({listed.failure_cause}): {listed.stderr.strip()[-300:]}"
        _LOG.warning("staging into %s: attempt %d/%d failed: %s", INPUT_DIR, attempt, attempts, problem)
    if not found:
        raise StagingError(
            f"directory empty: {INPUT_DIR} holds none of the {len(expected)} input file(s) "
            f"after {attempts} attempts; last problem: {problem}"
        )
    raise StagingError(f"staging into {INPUT_DIR} failed after {attempts} attempts: {problem}")


@dataclass(frozen=True)
class BucketPrefix:
    """`hf://buckets/OWNER/NAME/PREFIX`, split into the bucket id and the prefix."""

    bucket_id: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> BucketPrefix:
        parts = url[len(BUCKET_SCHEME) :].strip("/").split("/", 2) if url.startswith(BUCKET_SCHEME) else []
        if len(parts) < 2 or not all(parts[:2]):
            raise StagingError(f"{url!r} is not a bucket prefix: expected {BUCKET_SCHEME}OWNER/NAME/PREFIX")
        return cls(f"{parts[0]}/{parts[1]}", parts[2].strip("/") if len(parts) == 3 else "")

    def __str__(self) -> str:
        return f"{BUCKET_SCHEME}{self.bucket_id}/{self.prefix}".rstrip("/")


def is_transient(error: BaseException) -> bool:
    """True for errors worth retrying: HTTP 5xx/408/429, or no HTTP status (timeouts, resets)."""
    if isinstance(error, (DagentError, TypeError, ValueError, AttributeError, KeyError)):
        return False
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status in (408, 429)
    return True


def _retry(what: str, fn: Callable[[], _T], *, attempts: int, backoff_s: float, sleep: Callable[[float], Any]) -> _T:
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:
            if not is_transient(e):
                raise StagingError(
                    f"{what} failed: {e} ({describe_secrets(['HF_TOKEN'])}; check the "
                    "bucket name and that this token can read it)"
                ) from e
            if attempt == attempts:
                raise StagingError(f"{what} failed after {attempts} attempts: {e}") from e
            delay = backoff_s * attempt
            _LOG.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.1f s",
                what,
                attempt,
                attempts,
                str(e).splitlines()[0][:200] if str(e) else type(e).__name__,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")


def _read_manifest(folder: Path) -> dict[str, Path] | None:
    """The cached files of a complete download, or None if absent, partial or changed."""
    try:
        sizes = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    files = {name: folder / name for name in sorted(sizes)}
    ok = all(p.is_file() and p.stat().st_size == sizes[n] for n, p in files.items())
    return files if ok and files else None


def fetch_bucket(
    url: str,
    cache_dir: str | Path,
    *,
    api: Any = None,
    token: str | None = None,
    attempts: int = 4,
    backoff_s: float = 2.0,
    sleep: Callable[[float], Any] = time.sleep,
) -> dict[str, Path]:
    """Download every file under the bucket prefix `url` into `cache_dir`; `{name: path}` for `stage()`.

    `api` is a `huggingface_hub.HfApi` (default: a new one); `token` defaults to `$HF_TOKEN`, then
    huggingface_hub's cached login. A complete earlier download of the same prefix is reused.
    """
    where = BucketPrefix.parse(url)
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / hashlib.sha256(str(where).encode()).hexdigest()[:16]
    if attempts < 1:
        raise ConfigError(f"attempts must be at least 1, got {attempts}")
    cached = _read_manifest(final)
    if cached is not None:
        return cached
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    token = token or os.environ.get("HF_TOKEN") or None
    _LOG.info("staging %s into %s (%s)", where, final, describe_secrets(["HF_TOKEN"]))
    retry = dict(attempts=attempts, backoff_s=backoff_s, sleep=sleep)

    def listing() -> list[Any]:
        tree = api.list_bucket_tree(where.bucket_id, prefix=where.prefix or None, recursive=True, token=token)
        return [f for f in tree if getattr(f, "type", None) == "file"]

    listed = _retry(f"listing {where}", listing, **retry)
    if not listed:
        raise StagingError(
            f"nothing at prefix {where}: the bucket listing returned no files; check the "
            f"prefix and that the token can read the bucket ({describe_secrets(['HF_TOKEN'])})"
        )
    by_name: dict[str, Any] = {}
    for f in listed:  # flatten at download time: the agent sees base names only
        name = posixpath.basename(f.path)
        if name in by_name:
            raise StagingError(f"cannot flatten {where}: {by_name[name].path} and {f.path} are both {name!r}")
        by_name[name] = f
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache))
    try:
        _retry(
            f"downloading {len(by_name)} file(s) from {where}",
            lambda: api.download_bucket_files(
                where.bucket_id,
                [(f, str(tmp / n)) for n, f in by_name.items()],
                raise_on_missing_files=False,
                token=token,
            ),
            **retry,
        )
        arrived = {n for n in by_name if (tmp / n).is_file()}
        if not arrived:
            raise StagingError(
                f"directory empty: {len(by_name)} file(s) listed under {where} but none arrived in {tmp}"
            )
        if missing := sorted(set(by_name) - arrived):
            raise StagingError(
                f"incomplete download from {where}: {len(missing)} of {len(by_name)} file(s) "
                f"missing: {', '.join(missing[:5])}"
            )
        (tmp / _MANIFEST).write_text(json.dumps({n: (tmp / n).stat().st_size for n in sorted(by_name)}))
        try:  # only complete downloads are ever renamed into place
            os.rename(tmp, final)
        except OSError:
            if (done := _read_manifest(final)) is not None:
                return done  # another rollout of the same task finished first
            shutil.rmtree(final, ignore_errors=True)  # a damaged earlier entry
            try:
                os.rename(tmp, final)
            except OSError as e:
                raise StagingError(f"could not publish the download of {where} at {final}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {n: final / n for n in sorted(by_name)}


def stage_bucket(sandbox: Sandbox, url: str, cache_dir: str | Path, **kwargs: Any) -> dict[str, Path]:
    """`fetch_bucket` then `sandbox.stage`; returns what was staged."""
    files = fetch_bucket(url, cache_dir, **kwargs)
    sandbox.stage(files)
    return files
