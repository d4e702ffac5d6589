"""A small, real HTTP stand-in for the Hugging Face Hub, for `HfApi(endpoint=hub.url, token=...)`.

It serves what huggingface_hub 2.4's `whoami`, `create_repo`, `repo_info` and `create_commit` /
`upload_folder` / `upload_file` request, for every repo type (model, dataset, space, kernel):

- `GET  /api/whoami-v2`
- `POST /api/repos/create` (409 when the repo exists, which `exist_ok=True` accepts)
- `GET  /api/{type}s/{namespace}/{name}[/revision/{revision}]` (id, sha, siblings)
- `POST /api/{type}s/{namespace}/{name}/preupload/{revision}`: every file is "regular" (uploaded
  inline, base64, in the commit) with the git-sha1 of what the repo already holds as its oid, so
  an unchanged file is skipped as on the Hub
- `POST /api/{type}s/{namespace}/{name}/commit/{revision}`: the NDJSON payload (header, file,
  deletedFile, deletedFolder); the `commitUrl` uses the host the client called
- `POST /api/validate-yaml` (create_commit sends a root README.md there; accepted unchecked)
- Jobs: `POST /api/jobs/{namespace}` (run_job; the spec kept in `hub.jobs`), `GET .../{id}`
  (inspect_job), `GET .../{id}/logs` (an SSE stream); buckets: `GET /api/buckets/{id}/tree[/{prefix}]`
  (list_bucket_tree over `hub.buckets`, seeded by a test: uploads and downloads go through Xet)
- Spaces: `POST .../secrets` and `.../variables` (kept in the repo's settings), `POST .../restart`
  and `GET .../runtime` (stage RUNNING once restarted), `POST /api/{type}s/{id}/duplicate`

Downloads: `GET /api/{type}s/{namespace}/{name}/tree/{revision}[/{path}]` (recursive listing) and
`GET|HEAD /[datasets/|spaces/]{namespace}/{name}/resolve/{main or the commit}/{path}` (what
`hf_hub_download` and `snapshot_download` fetch, with `ETag` and `X-Repo-Commit`). Only
revision `main`, no pull requests, no LFS/Xet (`lfsFile` lines are refused: this fake never
answers "lfs"). Every request needs `Authorization: Bearer <token>`; another or no
token gets the Hub's 401. Repos live in memory: read them back with `hub.files(repo_id, repo_type)`
and `hub.commits(repo_id, repo_type)`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.factories import LiveServer

KINDS = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    repo_type: str
    repo_id: str
    settings: dict[str, Any]  # the create payload less name/organization (visibility, sdk, secrets...)
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)  # {"oid", "summary", "description", "paths"}

    @property
    def sha(self) -> str:
        return self.commits[-1]["oid"] if self.commits else "0" * 40


class FakeHub:
    """Start with `with FakeHub() as hub:` (or `.start()` / `.stop()`); `hub.url` is the endpoint."""

    def __init__(self, *, token: str = "hf_fake", user: str = "fake-user") -> None:
        self.token, self.user = token, user
        self.jobs: dict[str, dict[str, Any]] = {}  # id -> {"spec": what run_job sent, "stage", "logs"}
        self.buckets: dict[str, dict[str, bytes]] = {}  # bucket id -> path -> bytes (seeded: Xet is not served)
        self.repos: dict[tuple[str, str], FakeRepo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path), in order
        self.app = self._build_app()
        self._live: LiveServer | None = None

    # --- test side -------------------------------------------------------------------------
    def start(self) -> FakeHub:
        self._live = LiveServer(self.app)
        return self

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._live is None:
            raise RuntimeError("FakeHub is not running: use `with FakeHub() as hub:` or call start()")
        return self._live.url

    def files(self, repo_id: str, repo_type: str = "model") -> dict[str, bytes]:
        """What the repo holds now, path -> bytes (KeyError when the repo was never created)."""
        return self.repos[(repo_type, repo_id)].files

    def settings(self, repo_id: str, repo_type: str = "model") -> dict[str, Any]:
        return self.repos[(repo_type, repo_id)].settings

    def commits(self, repo_id: str, repo_type: str = "model") -> list[dict[str, Any]]:
        return self.repos[(repo_type, repo_id)].commits

    # --- server side -----------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI()

        def error(status: int, message: str, code: str | None = None) -> Response:
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            return JSONResponse({"error": message}, status_code=status, headers=headers)

        @app.middleware("http")
        async def authenticate(request: Request, call_next):
            self.requests.append((request.method, request.url.path))
            if request.headers.get("authorization") != f"Bearer {self.token}":
                return error(401, "Invalid credentials in Authorization header")
            return await call_next(request)

        def find(kind: str, namespace: str, name: str) -> FakeRepo | Response:
            if kind not in KINDS:
                return error(404, f"unknown repo kind {kind!r}")
            repo = self.repos.get((KINDS[kind], f"{namespace}/{name}"))
            return repo if repo is not None else error(404, "Repository not found", "RepoNotFound")

        def check_revision(revision: str) -> Response | None:
            return None if revision == "main" else error(404, f"Invalid rev id: {revision}", "RevisionNotFound")

        def base(request: Request) -> str:
            return str(request.base_url).rstrip("/")

        @app.get("/api/whoami-v2")
        async def whoami():
            return {
                "type": "user",
                "name": self.user,
                "fullname": self.user,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "fake", "role": "write"}},
            }

        @app.post("/api/repos/create")
        async def create_repo(request: Request):
            body = await request.json()
            repo_type = body.get("type") or "model"
            if repo_type not in URL_PREFIX:
                return error(400, f"invalid repo type {repo_type!r}")
            repo_id = f"{body.get('organization') or self.user}/{body['name']}"
            url = f"{base(request)}/{URL_PREFIX[repo_type]}{repo_id}"
            if (repo_type, repo_id) in self.repos:
                return JSONResponse(
                    {"error": f"You already created this {repo_type} repo", "url": url}, status_code=409
                )
            settings = {k: v for k, v in body.items() if k not in ("name", "organization", "type")}
            self.repos[(repo_type, repo_id)] = FakeRepo(repo_type, repo_id, settings)
            return {"url": url, "name": repo_id}

        @app.get("/api/{kind}/{namespace}/{name}")
        @app.get("/api/{kind}/{namespace}/{name}/revision/{revision:path}")
        async def repo_info(kind: str, namespace: str, name: str, revision: str = "main"):
            if kind == "jobs":  # /api/jobs/{namespace}/{id} shares this route's shape
                return await inspect_job(namespace, name)
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            if (bad := check_revision(revision)) is not None:
                return bad
            return {
                "id": repo.repo_id,
                "sha": repo.sha,
                "private": repo.settings.get("visibility") == "private",
                "siblings": [{"rfilename": p} for p in sorted(repo.files)],
                **({"sdk": repo.settings["sdk"]} if "sdk" in repo.settings else {}),
            }

        @app.post("/api/{kind}/{namespace}/{name}/preupload/{revision:path}")
        async def preupload(kind: str, namespace: str, name: str, revision: str, request: Request):
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            if (bad := check_revision(revision)) is not None:
                return bad
            files = (await request.json())["files"]
            return {
                "files": [
                    {
                        "path": f["path"],
                        "uploadMode": "regular",
                        "shouldIgnore": False,
                        "oid": git_sha1(repo.files[f["path"]]) if f["path"] in repo.files else None,
                    }
                    for f in files
                ]
            }

        @app.post("/api/{kind}/{namespace}/{name}/commit/{revision:path}")
        async def commit(kind: str, namespace: str, name: str, revision: str, request: Request):
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            if (bad := check_revision(revision)) is not None:
                return bad
            if request.query_params.get("create_pr"):
                return error(400, "the fake hub does not open pull requests")
            header: dict[str, Any] = {}
            files = dict(repo.files)
            paths: list[str] = []
            for line in (await request.body()).splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    header = value
                elif key == "file":
                    if value.get("encoding") != "base64":
                        return error(400, f"unsupported encoding {value.get('encoding')!r}")
                    files[value["path"]] = base64.b64decode(value["content"])
                    paths.append(value["path"])
                elif key == "deletedFile":
                    if files.pop(value["path"], None) is None:
                        return error(404, "A file with this name doesn't exist", "EntryNotFound")
                    paths.append(value["path"])
                elif key == "deletedFolder":
                    folder = value["path"].rstrip("/") + "/"
                    for p in [p for p in files if p.startswith(folder)]:
                        del files[p]
                        paths.append(p)
                else:  # lfsFile: this fake never answers "lfs"/Xet, so this is a client bug
                    return error(400, f"the fake hub takes only regular files, got a {key!r} line")
            if not header.get("summary"):
                return error(400, "the commit has no header with a summary")
            oid = hashlib.sha1(json.dumps([repo.sha, header, paths]).encode()).hexdigest()
            repo.files = files
            repo.commits.append(
                {"oid": oid, "summary": header["summary"], "description": header.get("description", ""), "paths": paths}
            )
            return {
                "commitUrl": f"{base(request)}/{URL_PREFIX[repo.repo_type]}{repo.repo_id}/commit/{oid}",
                "commitOid": oid,
                "pullRequestUrl": None,
                "success": True,
            }

        @app.post("/api/validate-yaml")
        async def validate_yaml():
            return {"errors": [], "warnings": []}

        @app.get("/api/{kind}/{namespace}/{name}/tree/{revision}")
        @app.get("/api/{kind}/{namespace}/{name}/tree/{revision}/{path:path}")
        async def tree(kind: str, namespace: str, name: str, revision: str, request: Request, path: str = ""):
            if kind == "buckets":  # /api/buckets/{id}/tree/{prefix}: the prefix, as the client sent it
                return bucket_listing(namespace, name, request.url.path.split("/tree/", 1)[1])
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            if revision not in ("main", repo.sha):
                return error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            prefix = path.strip("/") + "/" if path.strip("/") else ""
            files = sorted(p for p in repo.files if p.startswith(prefix))
            dirs = sorted(
                {"/".join(p.split("/")[:k]) for p in files for k in range(1, p.count("/") + 1)}
                - ({prefix.rstrip("/")} if prefix else set())
            )
            return [
                {"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs if d.startswith(prefix)
            ] + [{"type": "file", "oid": git_sha1(repo.files[p]), "size": len(repo.files[p]), "path": p} for p in files]

        @app.post("/api/spaces/{namespace}/{name}/secrets")
        @app.post("/api/spaces/{namespace}/{name}/variables")
        async def space_setting(namespace: str, name: str, request: Request):
            repo = find("spaces", namespace, name)
            if isinstance(repo, Response):
                return repo
            body = await request.json()
            which = "secrets" if request.url.path.endswith("/secrets") else "variables"
            repo.settings.setdefault(which, {})[body["key"]] = body.get("value")
            return {}

        @app.post("/api/spaces/{namespace}/{name}/restart")
        @app.get("/api/spaces/{namespace}/{name}/runtime")
        async def space_runtime(namespace: str, name: str, request: Request):
            repo = find("spaces", namespace, name)
            if isinstance(repo, Response):
                return repo
            if request.method == "POST":
                repo.settings["restarts"] = repo.settings.get("restarts", 0) + 1
            return {
                "stage": "RUNNING" if repo.settings.get("restarts") else "BUILDING",
                "hardware": {"current": "cpu-basic", "requested": "cpu-basic"},
            }

        @app.post("/api/{kind}/{namespace}/{name}/duplicate")
        async def duplicate(kind: str, namespace: str, name: str, request: Request):
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            body = await request.json()
            target = body["repository"]
            if (repo.repo_type, target) in self.repos:
                return JSONResponse({"error": "already exists"}, status_code=409)
            settings = {k: v for k, v in repo.settings.items() if k not in ("secrets", "variables", "restarts")}
            settings["secrets"] = {s["key"]: s["value"] for s in body.get("secrets") or []}
            settings["variables"] = {v["key"]: v["value"] for v in body.get("variables") or []}
            settings["duplicated_from"] = repo.repo_id
            copy = FakeRepo(repo.repo_type, target, settings, files=dict(repo.files), commits=list(repo.commits))
            self.repos[(repo.repo_type, target)] = copy
            return {"url": f"{base(request)}/{URL_PREFIX[repo.repo_type]}{target}"}

        def job_info(job: dict[str, Any]) -> dict[str, Any]:
            return {
                "id": job["id"],
                "createdAt": "2026-12-02T00:00:00Z",
                "owner": {"id": "u1", "name": job["ns"], "type": "user"},
                "dockerImage": job["spec"].get("dockerImage"),
                "command": job["spec"].get("command"),
                "arguments": job["spec"].get("arguments"),
                "environment": job["spec"].get("environment"),
                "secrets": sorted(job["spec"].get("secrets") or {}),  # names back, never values
                "flavor": job["spec"].get("flavor"),
                "labels": job["spec"].get("labels"),
                "status": {"stage": job["stage"], "message": None},
            }

        @app.post("/api/jobs/{namespace}")
        async def run_job(namespace: str, request: Request):
            spec = await request.json()
            job = {
                "id": f"job{len(self.jobs) + 1:04d}",
                "ns": namespace,
                "spec": spec,
                "stage": "COMPLETED",
                "logs": [f"uv run {' '.join(spec.get('command') or [])}", "done"],
            }
            self.jobs[job["id"]] = job
            return job_info(job)

        @app.get("/api/jobs/{namespace}/{job_id}")
        async def inspect_job(namespace: str, job_id: str):
            job = self.jobs.get(job_id)
            return job_info(job) if job and job["ns"] == namespace else error(404, "Job not found")

        @app.get("/api/jobs/{namespace}/{job_id}/logs")
        async def job_logs(namespace: str, job_id: str):
            job = self.jobs.get(job_id)
            if not job:
                return error(404, "Job not found")
            lines = ["===== Job started ====="] + job["logs"]
            body = "".join(f"data: {json.dumps({'data': ln, 'timestamp': '2026-12-02T00:00:00Z'})}\n\n" for ln in lines)
            return Response(body, media_type="text/event-stream")

        @app.get("/api/buckets/{namespace}/{name}/tree")
        async def bucket_tree(namespace: str, name: str):
            return bucket_listing(namespace, name, "")

        def bucket_listing(namespace: str, name: str, prefix: str) -> Any:
            files = self.buckets.get(f"{namespace}/{name}")
            if files is None:
                return error(404, "Bucket not found")
            return [
                {"type": "file", "path": p, "size": len(data), "xetHash": git_sha1(data)}
                for p, data in sorted(files.items())
                if p.startswith(prefix)
            ]

        def resolve(kind: str, namespace: str, name: str, revision: str, path: str, head: bool) -> Response:
            repo = find(kind, namespace, name)
            if isinstance(repo, Response):
                return repo
            if revision not in ("main", repo.sha):
                return error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            if path not in repo.files:
                return error(404, "Entry not found", "EntryNotFound")
            data = repo.files[path]
            headers = {"ETag": f'"{git_sha1(data)}"', "X-Repo-Commit": repo.sha, "Content-Length": str(len(data))}
            return Response(b"" if head else data, headers=headers, media_type="application/octet-stream")

        for prefix, kind in (("/datasets", "datasets"), ("/spaces", "spaces"), ("", "models")):

            def make(kind: str = kind):
                async def get_file(namespace: str, name: str, revision: str, path: str, request: Request):
                    return resolve(kind, namespace, name, revision, path, request.method == "HEAD")

                return get_file

            app.add_api_route(
                prefix + "/{namespace}/{name}/resolve/{revision}/{path:path}", make(), methods=["GET", "HEAD"]
            )

        return app
