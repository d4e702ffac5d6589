"""The Space images, built with the real Docker from a clean checkout and run as Spaces run them.

Each image is built exactly as its Dockerfile says (the base from scripts/docker_base.sh) and run as
its own user, uid 1000, with no added privileges: Docker's default runtime refuses the user
namespaces bubblewrap needs, so the servers take the landlock tier (Landlock + seccomp) and serve;
bubblewrap forced there is refused with the fix named; the documented runtime setting gives
bubblewrap back. From inside an episode the outside client's probes (the suite's gold, the suite's
directory, the server's port, a route out) fail on both tiers. The black-box image plays one graded
rollout with opencode and one with pi against the local engine under the default runtime (their
TCP to the capture proxy is the one port their sandboxes may connect to), and runs a black-box
evaluation job as HF Jobs starts one in it; the demo image serves the app with a task loaded from
the suite it is given, under the default runtime. The white-box image builds the bundled suite at
build time (on the landlock tier) and, given no suite, serves it: its oracle is graded; the others
take a suite mounted read-only here (a Hub dataset on a Space).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pytest

from dagent.serving import free_port
from tests.spaces.docker import NAMESPACES, ROOT, build, clean_checkout, need_docker, readable_clone, readable_copy, run

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGES = {
    "whitebox": ("spaces/data-agent/Dockerfile", "dagent-test-whitebox"),
    "blackbox": ("spaces/data-agent-blackbox/Dockerfile", "dagent-test-blackbox"),
    "demo": ("spaces/demo/Dockerfile", "dagent-test-demo"),
}
SUITE = "/data/suite"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    need_docker()
    return clean_checkout(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="module")
def mounted_suite(suite_dir, tmp_path_factory) -> Path:
    return readable_copy(suite_dir, tmp_path_factory.mktemp("mount") / "suite")


def image(checkout: Path, kind: str, *build_args: str) -> str:
    dockerfile, tag = IMAGES[kind]
    build(checkout, dockerfile, tag, *build_args)
    return tag


def bundled(box) -> str:
    """The digest of the suite an image serves when DAGENT_SUITE is unset (the one its build made)."""
    return box.exec(
        "python",
        "-c",
        "from dagent.provenance import suite_revision; from dagent.suites.sources "
        "import load_tasks; print(suite_revision(load_tasks(None))['digest'])",
    ).strip()


def host_digest(built) -> str:
    from dagent.provenance import suite_revision
    from dagent.suites.sources import load_tasks

    return suite_revision(load_tasks(built[0]))["digest"]


BASE = "spaces/base/Dockerfile"


def stage(text: str, name: str) -> str:
    """The stage `FROM ... AS name` of a Dockerfile, up to the next FROM."""
    start = text.index(f" AS {name}\n")
    start = text.rindex("\nFROM ", 0, start) + 1
    end = text.find("\nFROM ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_one_shared_base_and_each_space_image_starts_from_it_runs_as_uid_1000_under_tini():
    base_text = (ROOT / BASE).read_text()
    base = stage(base_text, "dagent-base")
    assert base.startswith("FROM python:3.11-slim-trixie AS dagent-base")  # trixie's Node 20 runs pi (>= 20.6)
    assert "useradd --create-home --uid 1000 user" in base and "bubblewrap curl tini" in base
    suite = stage(base_text, "dagent-suite")
    assert suite.startswith("FROM dagent-base AS dagent-suite")
    assert suite.rstrip().endswith("RUN python -m datasets_build --out /home/user/.cache/dagent/suite")
    for dockerfile, _ in IMAGES.values():
        text = (ROOT / dockerfile).read_text()
        froms = [line for line in text.splitlines() if line.startswith("FROM ")]
        assert froms == ["FROM dagent-base"]  # the system and core dependencies written once, in the base
        assert "useradd" not in text and "apt-get install -y --no-install-recommends bubblewrap" not in text
        assert "\nUSER user\n" in text and 'ENTRYPOINT ["/usr/bin/tini", "--"]' in text and "HOME=/home/user" in text
        assert "ENV DAGENT_SUITE" not in text  # the bundled suite unless DAGENT_SUITE is set at run time
        # the cache's parents made as `user` first: COPY would make them root's and HOME's cache unwritable
        copy = (
            "RUN mkdir -p /home/user/.cache/dagent\nCOPY --from=dagent-suite --chown=user "
            "/home/user/.cache/dagent/suite /home/user/.cache/dagent/suite"
        )
        assert "USER user\n" in text[: text.index(copy)]
        # the image's extras installed before the package's code is copied: a code change rebuilds in seconds
        assert text.index('pip install --no-cache-dir ".[') < text.index("COPY dagent ./dagent")


def test_the_one_dockerfile_a_space_on_the_hub_builds_makes_the_same_image(checkout):
    """A Space cannot pull the local dagent-base: `dagent space deploy` uploads the base's stages and
    the Space's own as one file (dagent.launch.space.dockerfile). Built alone, as the Hub builds it,
    it serves the bundled suite as uid 1000, like the image built on the local base."""
    from dagent.launch.space import dockerfile

    tag = image(checkout, "whitebox")  # the local base images and the Space image, built first (cache)
    one = dockerfile("spaces/data-agent", root=checkout)
    r = subprocess.run(
        ["docker", "build", "--network", "host", "-f", "-", "-t", "dagent-test-whitebox-hub", "."],
        input=one,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    probe = "import os, dagent; print(os.getuid(), sorted(os.listdir('/home/user/.cache/dagent/suite'))[:3])"
    outs = [
        subprocess.run(["docker", "run", "--rm", t, "python", "-c", probe], capture_output=True, text=True).stdout
        for t in ("dagent-test-whitebox-hub", tag)
    ]
    assert outs[0] == outs[1] and outs[0].startswith("1000 ["), outs


def test_the_white_box_image_serves_isolated_episodes_on_landlock_and_on_bubblewrap(checkout, mounted_suite, built):
    tag = image(checkout, "whitebox")
    port = free_port()
    env = {"PORT": str(port), "DAGENT_SUITE": SUITE}
    refused = run(tag, "dagent-test-wb-bwrap", env={**env, "DAGENT_ISOLATION": "bwrap"}, volumes={mounted_suite: SUITE})
    try:  # bubblewrap demanded where the default runtime refuses namespaces: refused, the fix named
        assert refused.wait_exit() != 0
        assert "bubblewrap is unusable" in refused.logs()
    finally:
        refused.remove()
    for tier, options in (("landlock", ()), ("bwrap", NAMESPACES)):
        box = run(tag, f"dagent-test-wb-{tier}", env=env, volumes={mounted_suite: SUITE}, options=options)
        try:
            _serves_isolated_episodes(box, port, tier)
        finally:
            box.remove()
    # duplicated as is: no suite mounted, no DAGENT_SUITE; the suite the build made, its oracle graded
    box = run(tag, "dagent-test-wb-bundled", env={"PORT": str(port)})
    try:
        url = f"http://127.0.0.1:{port}"
        box.wait_serving(f"{url}/health", timeout_s=240)
        assert httpx.get(f"{url}/health").json()["sandbox"]["isolation"] == "landlock"
        assert bundled(box) == host_digest(built)  # built in `docker build`, byte for byte the host's build
        assert box.exec("sh", "-c", "mkdir -p ~/.cache/huggingface/hub && echo writable").strip() == "writable"
        solution = box.exec(
            "python",
            "-c",
            "from dagent.suites.sources import load_tasks; print(load_tasks(None).task_at('test', 0).solution)",
        )
        from dagent.envs.whitebox_client import white_box_client

        env_ = white_box_client(url)()
        env_.reset(split="test", index=0)
        answer = env_.bash(command="python3 - <<'DAGENT_EOF'\n" + solution + "\nDAGENT_EOF")
        assert env_.submit_solution(answer=answer.strip()).startswith("Answer submitted"), answer[-500:]
        assert env_.get_reward() > 1.0, answer[-500:]
    finally:
        box.remove()


def _serves_isolated_episodes(box, port: int, tier: str) -> None:
    url = f"http://127.0.0.1:{port}"
    box.wait_serving(f"{url}/health")
    assert box.exec("id", "-u").strip() == "1000" and box.exec("cat", "/proc/1/comm").strip() == "tini"
    health = httpx.get(f"{url}/health").json()
    assert health["sandbox"]["isolation"] == tier and health["sandbox"]["backend"] == "local"
    from dagent.envs.whitebox_client import white_box_client

    env_ = white_box_client(url)()
    env_.reset(split="test", index=0)
    probes = {
        "gold": f"cat {SUITE}/data/*.parquet | head -c 40 | od -c | head -2",
        "suite": f"ls {SUITE}/data",
        "server": f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('REACHED')\"",
        "outside": 'python -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
        "s.connect(('1.1.1.1', 9)); print('ROUTED')\"",
    }  # a route lookup: nothing is sent
    seen = {name: env_.bash(command=cmd) for name, cmd in probes.items()}
    assert "PAR1" not in seen["gold"] and "P   A   R   1" not in seen["gold"], seen
    assert "eval-" not in seen["suite"] and "test-" not in seen["suite"], seen
    assert "REACHED" not in seen["server"] and "ROUTED" not in seen["outside"], seen
    assert env_.bash(command="tail -n +2 /workdir/input/t.csv | wc -l") == "3"  # the absolute path too
    assert env_.submit_solution(answer=3).startswith("Answer submitted")
    assert env_.get_reward() > 1.0
    _real_clients_play(url)


def _real_clients_play(url: str) -> None:
    """The image's /mcp to the clients people use: the MCP SDK (one session carries the episode) and
    OpenEnv's MCPToolClient in production mode, each graded correct on the mounted test[0] (3 rows)."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from openenv.core.mcp_client import MCPToolClient

    async def sdk() -> dict:
        async with streamable_http_client(f"{url}/mcp") as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("start_episode", {"split": "test", "index": 0})
            counted = (await session.call_tool("bash", {"command": "tail -n +2 input/t.csv | wc -l"})).structuredContent
            await session.call_tool("submit_solution", {"answer": counted["output"].strip()})
            return (await session.call_tool("finish_episode", {})).structuredContent

    assert asyncio.run(sdk())["correct"] is True
    with MCPToolClient(base_url=url).sync() as env:
        eid = env.reset(split="test", index=0).observation.metadata["episode_id"]
        counted = env.call_tool("bash", command="tail -n +2 input/t.csv | wc -l")["output"].strip()
        assert env.call_tool("submit_solution", answer=counted)["ok"]
    assert httpx.get(f"{url}/data_agent/episodes/{eid}").json()["correct"] is True


@pytest.mark.parametrize("harness", ["opencode", "pi"])
def test_the_black_box_image_grades_a_rollout_with_each_agent(checkout, mounted_suite, harness, built):
    from benchmarks.rollouts import steered_engine

    tag = image(checkout, "blackbox")
    engine = steered_engine()  # on this host's loopback, which the container shares
    port = free_port()
    box = run(
        tag,
        f"dagent-test-bb-{harness}",
        volumes={mounted_suite: SUITE},  # the default runtime
        env={
            "PORT": str(port),
            "DAGENT_SUITE": SUITE,
            "DAGENT_ENGINE_URL": engine.url,
            "DAGENT_HARNESS": harness,
            "DAGENT_MAX_OUTPUT_TOKENS": "256",
            "DAGENT_MAX_ROLLOUTS": "2",
        },
    )
    try:
        url = f"http://127.0.0.1:{port}"
        box.wait_serving(f"{url}/health", timeout_s=240)
        assert box.exec("id", "-u").strip() == "1000"
        node = tuple(int(x) for x in box.exec("node", "--version").strip().lstrip("v").split(".")[:2])
        assert node >= (20, 6)  # pi's engines field
        assert bundled(box) == host_digest(built)  # duplicated as is, it serves the bundled suite
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "healthy" and health["sandbox"]["isolation"] == "landlock"
        r = httpx.post(f"{url}/data_agent_blackbox/rollout", json={"split": "train", "index": 0}, timeout=600).json()
        assert r["outcome"] == "correct" and r["reward"] > 1.0 and r["model_calls"] >= 1, (r, box.logs()[-3000:])
    finally:
        box.remove()
        engine.stop()


TORCH_PAGE = re.search(r"^ARG TORCH_WHEELS=(\S+)", (ROOT / "spaces/demo/Dockerfile").read_text(), re.M).group(1)
WHEELS_PORT = int(re.search(r"DAGENT_WHEELS_PORT:-(\d+)", (ROOT / "scripts/docker_images.sh").read_text()).group(1))


def test_the_demo_image_installs_the_cpu_torch_and_serves_a_task(checkout, mounted_suite, tmp_path, built):
    # where the CPU torch comes from: DAGENT_TORCH_WHEELS (a find-links page, or a folder served here
    # on loopback for the build), else the page the Dockerfile names, which must answer
    wheels = os.environ.get("DAGENT_TORCH_WHEELS") or TORCH_PAGE
    server = None
    if Path(wheels).is_dir():
        if not any(Path(wheels).glob("torch-2.13.0+cpu-*.whl")):
            pytest.fail(f"DAGENT_TORCH_WHEELS={wheels} has no torch-2.13.0+cpu wheel")
        wheels_port = free_port(prefer=WHEELS_PORT)  # the background build's URL where free: its cache
        server = subprocess.Popen(
            ["python", "-m", "http.server", str(wheels_port), "--bind", "127.0.0.1"],
            cwd=wheels,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wheels = f"http://127.0.0.1:{wheels_port}/"
    else:
        try:
            httpx.head(wheels, timeout=15, follow_redirects=True).raise_for_status()
        except httpx.HTTPError as e:
            pytest.skip(
                f"the CPU torch page {wheels} does not answer ({type(e).__name__}): set "
                "DAGENT_TORCH_WHEELS to a find-links page or a folder with torch 2.13.0+cpu"
            )
    try:
        tag = image(checkout, "demo", f"TORCH_WHEELS={wheels}")
    finally:
        if server is not None:
            server.terminate()
    port = free_port()
    box = run(
        tag,
        "dagent-test-demo",
        volumes={mounted_suite: SUITE},  # the default runtime: landlock
        env={"PORT": str(port), "DAGENT_SUITE": SUITE},
    )
    try:
        box.wait_serving(f"http://127.0.0.1:{port}/", timeout_s=240)
        assert "isolation holds" in box.logs()
        torch = box.exec("python", "-c", "import torch; print(torch.__version__, torch.version.cuda)").split()
        assert torch == ["2.13.0+cpu", "None"]
        assert bundled(box) == host_digest(built)  # what the suite box offers without DAGENT_SUITE
        from gradio_client import Client

        config = httpx.get(f"http://127.0.0.1:{port}/config", timeout=10).json()
        splits = next(c["props"]["choices"] for c in config["components"] if c.get("props", {}).get("label") == "split")
        assert [choice[0] for choice in splits] == ["train", "test", "eval"]  # the mounted suite
        loaded = Client(f"http://127.0.0.1:{port}/", verbose=False).predict(SUITE, "test", "test#0", api_name="/load")
        shown = "\n".join(str(x) for x in loaded)
        assert "demo.t100" in shown and "t.csv" in shown and "Error" not in shown, shown[:2000]
    finally:
        box.remove()


def test_a_black_box_job_runs_in_the_black_box_image_as_hf_jobs_starts_it(checkout, mounted_suite, tmp_path):
    """`dagent jobs run --image IMAGE eval --agent opencode ...` is `hf jobs uv run --image IMAGE --with
    "dagent[...] @ git+URL@SHA" -- jobs/eval.py ...`: uv in the image installs this commit into an
    empty environment and the job's opencode is the image's. Here the URL is this checkout (mounted)
    and the engine the steered tiny Qwen3 on loopback; one task, graded."""
    from benchmarks.rollouts import steered_engine
    from dagent.launch.job import job_spec

    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if not sha:
        pytest.skip("not a git checkout: the job installs dagent from a commit")
    tag = image(checkout, "blackbox")
    source = readable_clone(ROOT, tmp_path / "src")  # this commit, readable by the job's uid 1000
    engine = steered_engine()
    try:
        job = [
            "--agent",
            "opencode",
            "--engine-url",
            engine.url,
            "--model",
            "tiny-qwen3-steered",
            "--preset",
            "cpu",
            "--suite",
            SUITE,
            "--split",
            "train",
            "--limit",
            "1",
            "--workers",
            "1",
            "--out",
            "/tmp/out",
        ]
        spec = job_spec(
            "eval",
            job,
            flavor="cpu-upgrade",
            project_url="file:///src",
            revision=sha,
            extras="server,report",
            image=tag,
        )
        line = spec.hf_command()
        assert line[line.index("--image") + 1] == tag
        uv_run = [
            "uv",
            "run",
            "--no-project",
            "--python",
            spec.python,
            "--with",
            spec.requirement,
            "--",
            f"/src/{spec.script}",
            *spec.args,
        ]
        # the mounted checkout is root's, the job runs as uid 1000: git must be told it may read it
        # (a real job clones from https and needs nothing of the kind)
        trust = "git config --global --add safe.directory '*' && "
        r = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "host",
                *NAMESPACES,
                "-v",
                f"{source}:/src:ro",
                "-v",
                f"{mounted_suite}:{SUITE}:ro",
                tag,
                "sh",
                "-c",
                trust + " ".join(shlex.quote(a) for a in uv_run) + " && cat /tmp/out/*/summary.json",
            ],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
        summary = json.loads(r.stdout[r.stdout.index("{") :])
        assert summary["tasks"] == 1 and summary["provenance"]["project"]["revision"] == sha
        assert summary["correct"] == 1, (summary["ungraded_causes"], r.stderr[-3000:])
    finally:
        engine.stop()
