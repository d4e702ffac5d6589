"""No gold within reach: the isolation self-check (`dagent.sandbox.isolation`) on every local tier,
and the no-user-namespace path (`mountns`: namespaces as root, an unprivileged uid per sandbox)
forced here with `isolation="rlimits"`, end to end through the white-box server.

A planted suite directory is world-readable (mode 0755 under a 0755 parent), the layout of a Space
image that builds its suite under /opt: only the sandbox itself can keep an agent out of it.
Not covered: a host that really lacks user namespaces (the bwrap probe is forced to fail instead),
and "outside" beyond this machine (a route lookup only: nothing is ever sent off loopback).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from dagent.errors import IsolationError
from dagent.sandbox.base import Resources
from dagent.sandbox.isolation import PROBES, check_isolation, require_isolation, suite_paths
from dagent.sandbox.local import LocalBackend
from dagent.sandbox.tiers.bwrap import BwrapTier
from dagent.sandbox.tiers.mountns import MountnsTier
from tests.sandbox.test_local import _host_ip


@pytest.fixture()
def outside():
    """An address off loopback: this host's own interface address. The probe only asks whether a route
    to it exists (a UDP connect sends nothing), so no traffic goes there either way."""
    ip = _host_ip()
    return None if ip is None else (ip, 9)


def _mountns(tmp_path, **kw) -> LocalBackend:
    b = LocalBackend(base_dir=tmp_path / "sb", isolation="rlimits", **kw)
    if b.tier != "mountns":
        pytest.skip(f"the no-user-namespace path needs root here: {b.describe()}")
    return b


def _escaped(report) -> set[str]:
    return {p.name for p in report.escapes()}


def _ran(report) -> list[str]:
    """Every probe, less `server_port6` where this host has no IPv6 loopback to listen on."""
    return [p for p in PROBES if p != "server_port6" or socket.has_ipv6 and _ipv6_loopback()]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_every_probe_fails_inside_bubblewrap_and_the_no_namespace_path(tmp_path, open_suite, outside):
    kinds = {"mountns": _mountns(tmp_path, hidden=[open_suite])}
    bwrap = LocalBackend(base_dir=tmp_path / "bw")
    if bwrap.tier == "bwrap":
        kinds["bwrap"] = bwrap
    for tier, backend in kinds.items():
        report = check_isolation(backend, suite_dir=open_suite, **({"outside": outside} if outside else {}))
        assert [p.name for p in report.probes] == _ran(report), tier
        assert report.ok, (tier, report.summary())
        assert all(p.detail == "refused" for p in report.probes)


def test_the_check_catches_each_planted_escape(tmp_path, open_suite, outside, monkeypatch):
    # the no-namespace path, but the suite left visible: its uid may read a world-readable suite
    report = check_isolation(_mountns(tmp_path), suite_dir=open_suite)
    assert _escaped(report) == {"read_gold", "list_suite"}
    # no bubblewrap and not root (forced): the server's filesystem and network, as is
    monkeypatch.setattr(MountnsTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    bare = LocalBackend(base_dir=tmp_path / "bare", isolation="rlimits")
    assert bare.tier == "cwd"
    report = check_isolation(bare, suite_dir=open_suite, **({"outside": outside} if outside else {}))
    # every probe escapes, less what this host lacks: a route out, interfaces besides lo, MPTCP
    absent = {"outside"} if not outside else set()
    if not [n for _, n in socket.if_nameindex() if n != "lo"]:
        absent.add("netlink")
    if (
        Path("/proc/sys/net/mptcp/enabled").read_text().strip() != "1"
        if Path("/proc/sys/net/mptcp/enabled").exists()
        else True
    ):
        absent.add("mptcp")
    assert _escaped(report) == set(_ran(report)) - absent
    with pytest.raises(IsolationError) as e:
        require_isolation(bare, suite_dir=open_suite)
    message = str(e.value)
    assert message.startswith("refusing to serve: read_gold: the suite's files are readable")
    assert "server_port: sandboxes share the server's network" in message and "install bubblewrap" in message


def test_a_hub_snapshot_is_hidden_where_its_files_really_live(tmp_path, open_suite):
    """A Hub snapshot's files are links into the cache's blob store: hiding the snapshot directory
    alone leaves every gold readable by the blob's own path."""
    blobs = open_suite.parent / f"{open_suite.name}-blobs"
    blobs.mkdir(mode=0o755)
    try:
        for f in sorted((open_suite / "data").glob("*.parquet")):
            target = blobs / f.name
            f.rename(target)
            f.symlink_to(target)
        backend = _mountns(tmp_path, hidden=[open_suite])
        assert "read_gold" in _escaped(check_isolation(backend, suite_dir=open_suite))
        assert suite_paths(open_suite) == (open_suite, blobs)
        assert check_isolation(_mountns(tmp_path, hidden=suite_paths(open_suite)), suite_dir=open_suite).ok
    finally:
        shutil.rmtree(blobs, ignore_errors=True)


def test_the_unprivileged_uid_reads_nothing_the_server_owns_and_still_solves(tmp_path):
    backend = _mountns(tmp_path)
    secret = tmp_path / "server-only"
    secret.mkdir(mode=0o700)
    (secret / "gold.txt").write_text("42")
    table = tmp_path / "t.csv"
    table.write_text("x,y\n1,2\n3,4\n")
    with backend.create(Resources(timeout_s=60)) as a, backend.create(Resources(timeout_s=60)) as b:
        assert a.uid != b.uid and a.uid >= 200_000
        assert a.exec("id -u").stdout.strip() == str(a.uid)
        a.exec("echo mine > notes.txt")
        for probe in (
            f"cat {secret}/gold.txt",
            f"ls {a.host_workdir}",
            f"cat {a.host_workdir}/notes.txt",
            f"cat /proc/{os.getpid()}/environ",
            "ls /proc | grep -c '^[0-9]'",
        ):
            r = b.exec(probe)
            assert probe.startswith("ls /proc") or r.exit_code != 0, (probe, r.stdout)
        assert int(b.exec("ls /proc | grep -c '^[0-9]'").stdout) < 10  # its own pid namespace
        # no route out (a UDP connect is a routing decision: nothing is sent, isolated or not)
        assert (
            b.exec(
                "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                '.connect(("1.1.1.1", 443))\''
            ).exit_code
            != 0
        )
        # a file the server writes for the agent is the agent's own (it may edit it)
        b.write_file("sub/dir/given.py", "print(1)\n")
        assert b.exec("echo more >> sub/dir/given.py && touch sub/dir/new").exit_code == 0
        # and the task still solves, as that uid, on a read-only staged input
        b.stage({"t.csv": table})
        r = b.exec(
            "python3 -c \"import pandas as pd; print(pd.read_csv('input/t.csv').y.sum())\" > answer.txt"
            " && cat answer.txt && ! touch input/x"
        )
        assert r.exit_code == 0 and r.stdout.strip() == "6", r.stderr
        assert b.read_file("answer.txt") == b"6\n"


def test_the_white_box_server_refuses_a_readable_suite_and_serves_behind_the_uid(open_suite, monkeypatch):
    from dagent.envs.whitebox_client import white_box_client
    from dagent.envs.whitebox_server import create_app
    from dagent.suites.sources import load_tasks
    from tests.factories import LiveServer

    suite = load_tasks(open_suite)
    monkeypatch.setattr(BwrapTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    exposed = LocalBackend(isolation="rlimits")
    if exposed.tier != "mountns":
        pytest.skip(f"the no-user-namespace path needs root here: {exposed.describe()}")
    with pytest.raises(IsolationError, match="read_gold"):
        create_app(suite, backend=exposed)
    live = LiveServer(create_app(suite, max_episodes=2))  # its own backend: the suite hidden
    try:
        env = white_box_client(live.url)()
        env.reset(split="train", index=1, task_id="demo.t1", prompt=[{"role": "user", "content": ""}])
        assert env.bash(command="id -u").strip() != "0"
        listed = env.bash(command=f"ls {open_suite}/data")  # the suite: covered by an empty tmpfs (mode 0)
        assert "Permission denied" in listed and "parquet" not in listed
        assert env.bash(command="awk -F, 'NR>1{s+=$2} END{print s}' input/t.csv") == "12"
        assert env.submit_solution(answer=12).startswith("Answer submitted")
        assert env.get_reward() > 1.0
    finally:
        live.stop()


def test_a_server_that_is_pid_1_is_not_confused_with_the_sandboxes_own_init(tmp_path):
    """In a container without an init process the server is pid 1, and inside a sandbox with its own
    pid namespace so is the sandbox's init: reading that one's environment is no leak."""
    backend = LocalBackend(base_dir=tmp_path / "bw")
    if backend.tier not in ("bwrap", "mountns"):
        pytest.skip(f"no pid namespace here ({backend.tier})")
    report = check_isolation(backend, server_pid=1)  # stands in for a server running as pid 1
    assert not {p.name for p in report.probes if p.escaped} & {"server_env", "server_mem"}, report.summary()


def test_the_bubblewrap_probe_runs_with_every_flag_a_sandbox_runs_with(tmp_path, monkeypatch):
    import subprocess

    seen: list[list[str]] = []
    real = subprocess.run

    def record(argv, *a, **kw):
        seen.append(list(argv))
        return real(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "run", record)
    backend = LocalBackend(base_dir=tmp_path / "bw")
    if not backend.bwrap:
        pytest.skip("no bwrap here")
    (probe,) = [a for a in seen if a and a[0] == backend.bwrap and a[-1] == "true"]
    for flag in ("--proc", "--dev", "--unshare-all", "--cap-drop"):
        assert flag in probe, flag  # `Can't mount proc` shows at start-up, not at the first episode
    if backend.tier == "bwrap":
        assert probe[:-1] == backend.isolator.base


def test_the_probe_table_in_docs_is_what_each_tier_does(tmp_path, open_suite, outside, monkeypatch):
    """docs/sandboxes.md's probe x tier table, measured: every probe on bwrap, mountns, landlock and
    the bare rlimits tier. A cell of the bare tier that this host cannot show (no IPv6, no route out,
    no MPTCP) is left unchecked rather than read as blocked."""
    import re

    from dagent.errors import SandboxError

    tiers = {"mountns": _mountns(tmp_path, hidden=[open_suite])}
    bwrap = LocalBackend(base_dir=tmp_path / "bw")
    if bwrap.tier != "bwrap":
        pytest.skip(f"no bubblewrap here ({bwrap.describe()})")
    tiers["bwrap"] = bwrap
    try:
        tiers["landlock"] = LocalBackend(base_dir=tmp_path / "ll", isolation="landlock")
    except SandboxError as e:
        pytest.skip(f"no landlock tier here: {e}")
    monkeypatch.setattr(MountnsTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    tiers["rlimits"] = LocalBackend(base_dir=tmp_path / "bare", isolation="rlimits")
    kw = {"outside": outside} if outside else {}
    seen = {
        tier: {p.name: p.escaped for p in check_isolation(b, suite_dir=open_suite, **kw).probes}
        for tier, b in tiers.items()
    }
    doc = (Path(__file__).parents[2] / "docs" / "sandboxes.md").read_text()
    block = re.search(r"<!-- probe-table -->\n(.*?)\n<!-- /probe-table -->", doc, re.S)
    assert block, "docs/sandboxes.md has no probe table between <!-- probe-table --> markers"
    rows = [line.strip("|").split("|") for line in block.group(1).splitlines()[2:]]
    columns = ["bwrap", "mountns", "landlock", "rlimits"]
    documented = {r[0].strip().strip("`"): dict(zip(columns, (c.strip() for c in r[1:]), strict=True)) for r in rows}
    measured = {}
    for probe in PROBES:
        measured[probe] = {t: "allowed" if seen[t].get(probe) else "blocked" for t in columns}
        assert list(documented.get(probe, {}).items())[:3] == list(measured[probe].items())[:3], probe
        if seen["rlimits"].get(probe):  # a cell the host could show
            assert documented[probe]["rlimits"] == "allowed", probe
    assert list(documented) == list(PROBES)


def test_an_interpreter_under_a_closed_directory_still_runs_as_the_sandbox_uid(tmp_path):
    """A checkout under a 0700 directory (`mktemp -d`, a home): its venv is below a directory the
    sandbox's own uid cannot pass, so `import` failed there and every episode was ungraded (F51)."""
    import subprocess
    import sys

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    venv = closed / "checkout" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    backend = _mountns(tmp_path, python=venv / "bin" / "python")
    with backend.create(Resources(timeout_s=60)) as sb:
        r = sb.exec("python -c 'import sys, json; print(sys.prefix)' && id -u && ls " + str(closed))
        assert r.exit_code == 0, r.stderr[-500:]
        prefix, uid, *listed = r.stdout.split()
        assert prefix == str(venv) and int(uid) == sb.uid
        assert listed == ["checkout"]  # the closed directory shows the tree, nothing else of it
