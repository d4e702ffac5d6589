"""Publish an evaluation's results to a Hub model repo, in one commit.

The commit holds every file the run wrote under `out_dir` (results.md, plots, each arm's
records.jsonl and summary.json), placed under `path_in_repo/`, and one `.eval_results/<name>.yaml`
per entry list: the Hub's model-repo format for scores (`huggingface_hub.EvalResultEntry`), which
the model page and the benchmark's leaderboard read.

Invariants (tests/eval/test_hub.py):
- One push is one commit: the files and the scores land together or not at all.
- An ungraded arm (score `None`) is not reported: it gets no entry, never a 0; a file whose every
  arm is ungraded is not written.
- Hub HTTP failures are wrapped once into `HubPushError`, whose message names the fix (401: set
  HF_TOKEN with write access to the repo). No message or log line contains the token: logs say
  only whether one is present.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import httpx2
import yaml
from huggingface_hub import CommitOperationAdd, EvalResultEntry, HfApi, eval_result_entries_to_yaml, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled
from huggingface_hub.utils import validate_repo_id

from dagent.errors import ConfigError, DagentError

__all__ = ["EVAL_RESULTS_DIR", "HubPushError", "eval_result_entries", "push_results"]

_LOG = logging.getLogger(__name__)
EVAL_RESULTS_DIR = ".eval_results"
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_FILE_NAME = re.compile(r"^\w[\w.-]*$")
_TOKEN_LIKE = re.compile(r"hf_[A-Za-z0-9]{20,}")


class HubPushError(DagentError):
    """The Hub refused or lost the push of an evaluation's results; the message names the fix."""


def eval_result_entries(
    scores_by_arm: dict[str, float | None],
    *,
    dataset_id: str,
    task_id: str,
    notes: str | None,
    date: str | None = None,
    dataset_revision: str | None = None,
    declared: list[str] | None = None,
    details: dict[str, str] | None = None,
) -> list[EvalResultEntry]:
    """One entry per graded arm, in the order given; an arm whose score is `None` is skipped.

    `dataset_id` must be a Hub dataset repo id (a Benchmark) and `task_id` one of the tasks its
    `eval.yaml` declares (`declared`): anything else links to nothing and is refused here, before
    any push. The arm's name goes into `notes` ("<notes> (arm <name>)") with `details[arm]` (its
    95% CI and exclusions), so arms scored on the same task stay apart. `date` is ISO-8601;
    without it the Hub uses the commit's time.
    """
    if not isinstance(dataset_id, str) or not _REPO_ID.match(dataset_id):
        raise ConfigError(
            f"dataset id {dataset_id!r} is not a Hub dataset repo id (OWNER/NAME): an eval result links "
            "to a Benchmark dataset repo; push the suite with `dagent suite push OWNER/NAME` and evaluate "
            "with --suite OWNER/NAME"
        )
    if declared is not None and task_id not in declared:
        raise ConfigError(
            f"task {task_id!r} is not declared by datasets/{dataset_id}'s eval.yaml (it declares "
            f"{', '.join(declared) or 'none'}): evaluate one of those splits"
        )
    entries = []
    for arm, value in scores_by_arm.items():
        if value is None:
            continue
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"arm {arm!r} has a non-finite score {value}: report an ungraded arm as None")
        extra = f"; {details[arm]}" if details and details.get(arm) else ""
        entries.append(
            EvalResultEntry(
                dataset_id=dataset_id,
                task_id=task_id,
                value=value,
                date=date,
                dataset_revision=dataset_revision,
                notes=(f"{notes} (arm {arm}{extra})" if notes else f"arm {arm}{extra}"),
            )
        )
    return entries


def push_results(
    repo_id: str,
    out_dir: Path,
    entries_by_file: dict[str, list[EvalResultEntry]],
    *,
    path_in_repo: str = "eval",
    api: HfApi | None = None,
    create: bool = True,
    token: str | None = None,
    commit_message: str = "Add evaluation results (dagent)",
) -> str:
    """Commit `out_dir`'s files under `path_in_repo/` and `.eval_results/<name>.yaml` per key of
    `entries_by_file` to the model repo `repo_id`, creating the repo first when `create`.

    `token` defaults to the `api`'s, then to HF_TOKEN or the saved login. Returns the commit URL.
    """
    _check_repo_id(repo_id)
    operations = _operations(Path(out_dir), entries_by_file, path_in_repo)
    api = api if api is not None else HfApi(token=token)
    has_token = bool(token or getattr(api, "token", None) or get_token())
    _LOG.info(
        "pushing %d files to model repo %s (token: %s)", len(operations), repo_id, "present" if has_token else "absent"
    )
    secrets = [s for s in (token, getattr(api, "token", None)) if isinstance(s, str) and s]
    stage = "creating"
    try:
        if create:
            api.create_repo(repo_id, repo_type="model", exist_ok=True, token=token)
        stage = "committing to"
        info = api.create_commit(repo_id, operations, commit_message=commit_message, repo_type="model", token=token)
    except HfHubHTTPError as e:
        raise HubPushError(_redact(_http_message(e, repo_id, stage), secrets)) from e
    except OfflineModeIsEnabled as e:
        raise HubPushError(f"cannot push results to {repo_id}: HF_HUB_OFFLINE is set; unset it to publish") from e
    except httpx2.TransportError as e:
        endpoint = getattr(api, "endpoint", "the Hub")
        raise HubPushError(
            _redact(
                f"could not reach {endpoint} while {stage} {repo_id} ({type(e).__name__}): "
                "check the network, or HF_ENDPOINT if you use a mirror",
                secrets,
            )
        ) from e
    _LOG.info("pushed results to %s", info.commit_url)
    return str(info.commit_url)


def _check_repo_id(repo_id: str) -> None:
    fix = "give the model repo as OWNER/NAME (letters, digits, '-', '_', '.'), e.g. my-org/qwen3-data-agent"
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id):
        raise ConfigError(f"bad model repo id {repo_id!r}: {fix}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ConfigError(f"bad model repo id {repo_id!r} ({e}): {fix}") from e


def _operations(
    out_dir: Path, entries_by_file: dict[str, list[EvalResultEntry]], path_in_repo: str
) -> list[CommitOperationAdd]:
    """The commit's additions: out_dir's files (walked, sorted) under the prefix, then the YAMLs."""
    if not out_dir.is_dir():
        raise ConfigError(f"no results directory at {out_dir}: pass the --out directory an evaluation wrote")
    prefix = path_in_repo.strip("/")
    if ".." in prefix.split("/"):
        raise ConfigError(f"path_in_repo {path_in_repo!r} leaves the repo: give a folder such as 'eval'")
    ops: dict[str, CommitOperationAdd] = {}
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        target = "/".join(filter(None, (prefix, path.relative_to(out_dir).as_posix())))
        ops[target] = CommitOperationAdd(path_in_repo=target, path_or_fileobj=str(path))
    for name, entries in entries_by_file.items():
        stem = name.removesuffix(".yaml")
        if not _FILE_NAME.match(stem):
            raise ConfigError(f"eval results file name {name!r}: use letters, digits, '-', '_', '.' (e.g. dagent_test)")
        if not entries:  # every arm ungraded: nothing to report
            _LOG.info("no graded entries for %s: %s/%s.yaml not written", name, EVAL_RESULTS_DIR, stem)
            continue
        target = f"{EVAL_RESULTS_DIR}/{stem}.yaml"
        if target in ops:
            raise ConfigError(
                f"{target} comes from both {out_dir} and entries_by_file: "
                "push out_dir under a path_in_repo such as 'eval'"
            )
        text = yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False, allow_unicode=True)
        ops[target] = CommitOperationAdd(path_in_repo=target, path_or_fileobj=text.encode())
    return list(ops.values())


def _http_message(e: HfHubHTTPError, repo_id: str, stage: str) -> str:
    status = e.response.status_code if e.response is not None else None
    where = f"while {stage} model repo {repo_id}"
    if status == 401:
        return (
            f"the Hub refused the credentials {where} (HTTP 401): set HF_TOKEN with write access to "
            f"{repo_id} (https://huggingface.co/settings/tokens) or pass token=..."
        )
    if status == 403:
        return (
            f"the token may not write {where} (HTTP 403): set HF_TOKEN to a token with write access to "
            f"{repo_id.split('/')[0]}/ (a fine-grained token needs write on that repo)"
        )
    if status == 404:
        return (
            f"{repo_id} was not found {where} (HTTP 404): check the repo id, or let push_results create it "
            "(create=True) with an HF_TOKEN that can see it"
        )
    detail = e.server_message or str(e).splitlines()[0]
    return f"the Hub answered HTTP {status} {where}: {detail.strip()}; retry, or fix what the Hub names"


def _redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, "***")
    return _TOKEN_LIKE.sub("hf_***", text)


def push_results_dataset(
    repo_id: str, out_dir: Path, run_name: str, *, api: HfApi | None = None, token: str | None = None
) -> str:
    """The evaluation directory (records, summaries, results.md, plots) under `runs/<run_name>/` of the
    Hub DATASET repo `repo_id`: one results dataset gathering every run (`--push-dataset`). Returns
    the commit URL."""
    _check_repo_id(repo_id)
    if not _FILE_NAME.match(run_name):
        raise ConfigError(f"run name {run_name!r}: use letters, digits, '-', '_', '.'")
    operations = _operations(Path(out_dir), {}, f"runs/{run_name}")
    api = api if api is not None else HfApi(token=token)
    secrets = [s for s in (token, getattr(api, "token", None)) if isinstance(s, str) and s]
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True, token=token)
        info = api.create_commit(
            repo_id, operations, commit_message=f"dagent evaluation {run_name}", repo_type="dataset", token=token
        )
    except HfHubHTTPError as e:
        raise HubPushError(_redact(_http_message(e, repo_id, "committing to"), secrets)) from e
    return str(info.commit_url)
