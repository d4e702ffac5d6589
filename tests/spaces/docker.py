"""Building and running the images with the real Docker, as a user and as Spaces do.

Every image is built from a CLEAN CHECKOUT (the files git ships, copied out of the work tree) on
the base `scripts/docker_base.sh` provides; containers run with `--network host` (traffic stays on
loopback, no bridge network is made) as the image's own user, uid 1000. Skipped, with the reason,
where no Docker daemon answers.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
# what Docker's default runtime refuses and bubblewrap needs: the runtime setting docs/sandboxes.md names
LOCK = "/tmp/dagent-docker-build.lock"  # held by scripts/docker_images.sh while it builds
NAMESPACES = ("--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined")


def daemon_missing() -> str | None:
    """Why Docker cannot be used here, or None."""
    if shutil.which("docker") is None:
        return "no docker client (scripts/setup.sh --tests installs Docker where it runs as root)"
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        return f"no Docker daemon answers ({(r.stderr or r.stdout).strip()[-200:]})"
    return None


def need_docker() -> None:
    reason = daemon_missing()
    if reason:
        pytest.skip(reason)


def clean_checkout(dest: Path) -> Path:
    """The files git ships (tracked, and untracked but not ignored), copied to `dest`."""
    from tests.envs.test_space import _shipped_tree

    return _shipped_tree(dest)


def build(checkout: Path, dockerfile: str, tag: str, *build_args: str) -> float:
    """`docker build -f DOCKERFILE -t TAG .` from `checkout`, after the shared base's two images from
    the same checkout (spaces/base/Dockerfile: `dagent-base`, `dagent-suite`, which every Space image
    starts FROM and copies from), all under one hold of the build lock; seconds taken. Fails with the
    log's tail."""
    base = subprocess.run(
        ["flock", LOCK, "bash", str(checkout / "scripts" / "docker_base.sh")], capture_output=True, text=True
    )
    assert base.returncode == 0, base.stderr[-2000:]
    started = time.monotonic()  # the lock: scripts/docker_images.sh may be building these images right now
    common = ["docker", "build", "--network", "host"]
    steps = [
        [*common, "-f", "spaces/base/Dockerfile", "--target", target, "-t", target, "."]
        for target in ("dagent-base", "dagent-suite")
    ]
    steps.append([*common, "-f", dockerfile, "-t", tag, *(a for arg in build_args for a in ("--build-arg", arg)), "."])
    script = " && ".join(shlex.join(step) for step in steps)
    r = subprocess.run(
        ["flock", LOCK, "bash", "-c", script], cwd=checkout, capture_output=True, text=True, timeout=1500
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return time.monotonic() - started


@dataclass
class Container:
    name: str

    def logs(self) -> str:
        r = subprocess.run(["docker", "logs", self.name], capture_output=True, text=True)
        return r.stdout + r.stderr

    def status(self) -> tuple[str, int]:
        r = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", self.name],
            capture_output=True,
            text=True,
            check=True,
        )
        state, code = r.stdout.split()
        return state, int(code)

    def exec(self, *cmd: str) -> str:
        return subprocess.run(["docker", "exec", self.name, *cmd], capture_output=True, text=True, check=True).stdout

    def wait_exit(self, timeout_s: float = 120) -> int:
        r = subprocess.run(["docker", "wait", self.name], capture_output=True, text=True, timeout=timeout_s)
        return int(r.stdout.strip())

    def wait_serving(self, url: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.status()[0] == "running", f"the container stopped:\n{self.logs()[-3000:]}"
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"{url} did not answer within {timeout_s:.0f} s:\n{self.logs()[-3000:]}")

    def remove(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True)


def run(
    tag: str,
    name: str,
    *,
    env: dict[str, str] | None = None,
    volumes: dict[Path, str] | None = None,
    options: tuple[str, ...] = (),
) -> Container:
    """`docker run -d` of `tag` as its image's user, on the host's network (loopback only)."""
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    args = ["docker", "run", "-d", "--name", name, "--network", "host", *options]
    for key, value in (env or {}).items():
        args += ["-e", f"{key}={value}"]
    for src, dest in (volumes or {}).items():
        args += ["-v", f"{src}:{dest}:ro"]
    subprocess.run([*args, tag], check=True, capture_output=True, text=True)
    return Container(name)


def readable_clone(repo: Path, dest: Path) -> Path:
    """A git clone of `repo` that the image's uid 1000 can read: a checkout made by `mktemp -d` (as CI
    makes one) is 0700, so mounting the checkout itself let the job's git read nothing."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(repo), str(dest)], check=True)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    dest.parent.chmod(0o755)
    return dest


def readable_copy(src: Path, dest: Path) -> Path:
    """A copy of `src` that the image's uid 1000 can read (pytest's temporary folders are 0700)."""
    shutil.copytree(src, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    dest.parent.chmod(0o755)
    return dest
