"""LocalBackend: real sandboxes on this machine (bubblewrap when usable, else rlimits only)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import dagent.sandbox.local as local
from dagent.errors import ConfigError, SandboxError, StagingError
from dagent.sandbox.base import Resources
from dagent.sandbox.local import OUTPUT_CAP, LocalBackend
from dagent.sandbox.tiers.mountns import MountnsTier

SMALL = Resources(memory_mb=512, timeout_s=20)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> LocalBackend:
    return LocalBackend(base_dir=tmp_path_factory.mktemp("sandboxes"))


@pytest.fixture()
def sb(backend: LocalBackend):
    with backend.create(SMALL) as s:
        yield s


@pytest.fixture()
def bwrap_sb(backend: LocalBackend):
    if backend.tier != "bwrap":
        pytest.skip(f"bubblewrap unusable here: {backend.describe()}")
    with backend.create(SMALL) as s:
        yield s


def _host_ip() -> str | None:
    """This host's address on a non-loopback interface, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") else ip


# -- exit codes, timeouts, memory ------------------------------------------------------------


@pytest.mark.failure_mode("F17")
def test_exit_zero_is_zero_and_ok(sb) -> None:
    r = sb.exec("echo hi")
    assert r.exit_code == 0 and r.exit_code is not None
    assert r.ok and r.failure_cause is None
    assert r.stdout == "hi\n" and r.stderr == ""


def test_nonzero_exit_codes_are_reported_as_is(sb) -> None:
    r = sb.exec("echo oops >&2; exit 3")
    assert (r.exit_code, r.stderr, r.failure_cause) == (3, "oops\n", "exit_3")
    assert sb.exec("exit 1").exit_code == 1
    assert sb.exec("echo 'bwrap: lookalike' >&2; exit 1").exit_code == 1  # data, not a setup error
    killed = sb.exec("kill -9 $$")  # a signal that is not a timeout: 128+N
    assert (killed.exit_code, killed.timed_out) == (137, False)
    if sb.backend.cgroups:  # the kernel counts OOM kills; without a cgroup 137 reads as OOM
        assert not killed.oom_killed


@pytest.mark.failure_mode("F18")
def test_timeout_kills_the_whole_tree(sb) -> None:
    t = time.monotonic()
    r = sb.exec("sleep 30 & sleep 30; echo never", timeout_s=1)
    assert r.timed_out and r.exit_code is None and not r.ok
    assert r.failure_cause == "sandbox_timeout"
    assert time.monotonic() - t < 5 and "never" not in r.stdout
    assert sb.exec("echo after").stdout == "after\n"  # the sandbox is still usable


@pytest.mark.failure_mode("F18")
@pytest.mark.parametrize(
    "hog",
    [
        "python -c 'x = bytearray(3 * 1024**3)'",
        "head -c 3G /dev/zero | tail -c 3G > /dev/null",  # no Python: coreutils buffering 3 GB
    ],
)
def test_memory_hog_is_oom_killed(sb, hog: str) -> None:
    r = sb.exec(hog)
    assert r.oom_killed and not r.ok and not r.timed_out
    assert r.failure_cause == "sandbox_oom"


@pytest.mark.failure_mode("F18")
@pytest.mark.parametrize(
    "hog",
    [
        "python -c 'x = bytearray(3 * 1024**3)'",
        "python -c 'import numpy; numpy.zeros(10**9)'",
        "head -c 3G /dev/zero | tail -c 3G > /dev/null",
    ],
)
def test_memory_hog_without_cgroup_is_caught_by_rlimit_as(tmp_path, monkeypatch, hog: str) -> None:
    monkeypatch.setattr(local, "_cgroup_parents", lambda: {})
    with LocalBackend(base_dir=tmp_path).create(SMALL) as s:
        assert "RLIMIT_AS" in s.backend.describe()
        r = s.exec(hog)
        assert r.oom_killed and r.failure_cause == "sandbox_oom"
        assert not s.exec("python -c 'print(1)'").oom_killed


def test_an_agents_runtime_gets_address_space_only_where_rlimit_as_bounds_memory(tmp_path, monkeypatch) -> None:
    """RLIMIT_AS counts reservations a JavaScript runtime never touches (measured: Bun aborts under a
    1 GB task's limit): the agent's allowance is added there, and never to a cgroup's memory limit."""
    from dataclasses import replace

    agent = replace(SMALL, runtime_address_space_mb=4096)
    with LocalBackend(base_dir=tmp_path / "cg").create(agent) as s:
        limit = s.exec("ulimit -v").stdout.strip()
        assert limit == "unlimited" if s.backend.cgroups else int(limit) == (SMALL.memory_mb + 4096) * 1024
    monkeypatch.setattr(local, "_cgroup_parents", lambda: {})
    with (
        LocalBackend(base_dir=tmp_path / "as").create(agent) as s,
        LocalBackend(base_dir=tmp_path / "plain").create(SMALL) as plain,
    ):
        assert int(s.exec("ulimit -v").stdout) == (SMALL.memory_mb + 4096) * 1024
        assert int(plain.exec("ulimit -v").stdout) == SMALL.memory_mb * 1024
        # 3 GB on a loaded 2-core CI machine once outran the default 20 s (a fresh-clone CI run, 2026-12-04;
        # 1.7 s alone): the limits are what is checked here, not the speed
        assert s.exec("python -c 'x = bytearray(3 * 1024**3)'", timeout_s=120).ok  # the task alone would be refused
        assert plain.exec("python -c 'x = bytearray(3 * 1024**3)'", timeout_s=120).oom_killed


def test_process_and_file_size_limits(backend: LocalBackend) -> None:
    if "pids" not in backend.cgroups:
        pytest.skip("no pids cgroup here (RLIMIT_NPROC is not enforced for root)")
    forker = (
        "import os, time\n"
        "pids = []\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(5); os._exit(0)\n"
        "        pids.append(pid)\n"
        "except OSError:\n"
        "    pass\n"
        "print(len(pids))\n"
        "for pid in pids:\n"
        "    os.kill(pid, 9)\n"
    )
    with backend.create(Resources(max_processes=20, max_file_mb=1)) as s:
        s.write_file("/workdir/fork.py", forker)
        r = s.exec("python fork.py")
        assert r.ok and int(r.stdout) < 20, r.stderr
        big = s.exec("head -c 2M /dev/zero > big.bin")
        assert big.exit_code == 128 + 25  # SIGXFSZ
        assert len(s.read_file("/workdir/big.bin") or b"") == 1024 * 1024


@pytest.mark.failure_mode("F22")
def test_secrets_travel_in_env_never_in_argv(sb, monkeypatch) -> None:
    argvs: list[list[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(argv, *a, **kw):
        argvs.append(list(argv))
        return real_popen(argv, *a, **kw)

    monkeypatch.setattr(local.subprocess, "Popen", recording_popen)
    secret = f"sk-{uuid.uuid4().hex}"
    r = sb.exec('printf %s "$API_KEY"', env={"API_KEY": secret})
    assert r.stdout == secret
    assert argvs and not any(secret in arg for argv in argvs for arg in argv)


def test_host_environment_does_not_leak(sb, monkeypatch) -> None:
    monkeypatch.setenv("DAGENT_HOST_ONLY", "x")
    env = sb.exec("env").stdout
    assert "DAGENT_HOST_ONLY" not in env and "HOME=/root" in env


def test_output_is_capped(sb) -> None:
    r = sb.exec(f"head -c {OUTPUT_CAP + 5000} /dev/zero | tr '\\0' a; printf '\\xff' >&2")
    assert r.stdout.startswith("a" * OUTPUT_CAP) and "truncated: 5000 more bytes" in r.stdout
    assert r.stderr == "\ufffd"


# -- isolation -------------------------------------------------------------------------------


def test_python_with_pandas_runs_inside(sb) -> None:
    r = sb.exec("python -c 'import pandas, sys; print(sys.prefix)'")
    assert r.ok, r.stderr
    assert r.stdout.strip() == os.path.realpath(sys.prefix)


def test_commands_run_in_workdir_with_a_writable_home(sb) -> None:
    r = sb.exec("pwd; echo x > $HOME/conf && cat $HOME/conf; echo y > /tmp/t && cat /tmp/t")
    assert r.ok, r.stderr
    assert r.stdout == "/workdir\nx\ny\n"
    assert sb.exec("cat $HOME/conf").stdout == "x\n"  # home persists between commands
    with pytest.raises(SandboxError, match="create it first"):
        sb.exec("pwd", cwd="/workdir/sub")
    sb.write_file("/workdir/sub/f", "z")
    assert sb.exec("pwd; cat f", cwd="/workdir/sub").stdout == "/workdir/sub\nz"


def test_no_network_inside(bwrap_sb) -> None:
    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    # the host's loopback listener by TCP (the one target this test controls); every other address by
    # a route lookup only (a UDP connect sends nothing), so no packet can leave even were it reachable
    targets = [("127.0.0.1", port, "tcp"), ("192.0.2.1", 80, "route"), ("1.1.1.1", 53, "route")]
    if ip := _host_ip():
        targets.append((ip, port, "route"))
    try:
        probe = (
            "import socket, sys\n"
            "for host, port, how in {targets!r}:\n"
            "    try:\n"
            "        if how == 'tcp':\n"
            "            socket.create_connection((host, port), timeout=2).close()\n"
            "        else:\n"
            "            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect((host, port))\n"
            "        print('REACHED', host, port)\n"
            "    except OSError as e:\n"
            "        print('blocked', host, port, e)\n"
        ).format(targets=targets)
        bwrap_sb.write_file("/workdir/probe.py", probe)
        r = bwrap_sb.exec("python probe.py")
        assert r.ok, r.stderr
        assert "REACHED" not in r.stdout and r.stdout.count("blocked") == len(targets)
    finally:
        server.close()


def test_host_filesystem_is_read_only_and_tmp_private(bwrap_sb) -> None:
    marker = Path("/tmp", f"dagent-host-{uuid.uuid4().hex}")
    marker.write_text("host")
    try:
        r = bwrap_sb.exec(f"touch /usr/x /etc/x /x; ls {marker}; echo in > /tmp/inside")
        assert "Read-only file system" in r.stderr and "No such file" in r.stderr
        assert not any(Path(p).exists() for p in ("/usr/x", "/etc/x", "/x"))
        assert bwrap_sb.exec("cat /tmp/inside").stdout == ""  # /tmp is fresh per command
    finally:
        marker.unlink()
    assert not any(Path("/tmp").glob("inside"))


def test_ro_binds_are_visible_read_only_and_checked(backend: LocalBackend, tmp_path) -> None:
    if backend.tier != "bwrap":
        pytest.skip(f"bubblewrap unusable here: {backend.describe()}")
    shared = tmp_path / "tool"
    shared.mkdir()
    (shared / "version").write_text("1.18.33")
    bound = LocalBackend(base_dir=tmp_path / "sb", ro_binds=[(shared, "/opt/tool")])
    with bound.create(SMALL) as s:
        r = s.exec("cat /opt/tool/version; echo x > /opt/tool/version")
        assert r.stdout == "1.18.33" and "Read-only file system" in r.stderr
    assert (shared / "version").read_text() == "1.18.33"
    with backend.create(SMALL) as plain:  # other backends' sandboxes do not see it
        assert "No such file" in plain.exec("cat /opt/tool/version").stderr
    with pytest.raises(ConfigError, match="does not exist"):
        LocalBackend(base_dir=tmp_path / "sb", ro_binds=[(tmp_path / "missing", "/opt/x")])
    with pytest.raises(ConfigError, match="absolute"):
        LocalBackend(base_dir=tmp_path / "sb", ro_binds=[(shared, "opt/x")])


def test_sandboxes_cannot_see_each_other(backend: LocalBackend) -> None:
    with backend.create(SMALL) as a, backend.create(SMALL) as b:
        assert a.exec("echo secret-a > mine.txt").ok
        assert b.exec("ls -A /workdir").stdout == ""
        assert b.read_file("/workdir/mine.txt") is None
        if backend.tier == "bwrap":
            r = b.exec(f"ls {a.host_workdir} {backend.base_dir}")
            assert r.exit_code != 0 and "secret" not in r.stdout


# -- files and staging -----------------------------------------------------------------------


def test_write_and_read_files_are_confined(sb) -> None:
    sb.write_file("/workdir/a/b.txt", "hello")
    assert sb.read_file("/workdir/a/b.txt") == b"hello"
    assert sb.exec("cat a/b.txt").stdout == "hello"
    assert sb.read_file("/workdir/missing") is None
    for bad in ("/etc/passwd", "/workdir/../etc/x", "/root/x"):
        with pytest.raises(SandboxError):
            sb.write_file(bad, "x")
        with pytest.raises(SandboxError):
            sb.read_file(bad)
    assert sb.exec("ln -s /etc/passwd leak; ln -s /etc escape").ok  # planted by the agent
    with pytest.raises(SandboxError):
        sb.read_file("/workdir/leak")
    with pytest.raises(SandboxError):
        sb.write_file("/workdir/escape/x", "pwned")


def test_stage_puts_exactly_the_given_files_in_input(sb, tmp_path) -> None:
    (tmp_path / "sales.csv").write_text("a,b\n1,2\n")
    (tmp_path / "gold.txt").write_text("42")  # next to the input, never passed
    sb.stage({"sales.csv": tmp_path / "sales.csv", "sub/more.csv": tmp_path / "sales.csv"})
    r = sb.exec("find /workdir -type f | sort; cat input/sales.csv")
    assert r.stdout == "/workdir/input/sales.csv\n/workdir/input/sub/more.csv\na,b\n1,2\n"
    assert sb.read_file("/workdir/input/sales.csv") == b"a,b\n1,2\n"


def test_staged_inputs_cannot_corrupt_the_cache(backend: LocalBackend, tmp_path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("original")
    with backend.create(SMALL) as a:
        a.stage({"t.csv": src})
        a.exec("echo corrupted > input/t.csv; rm -f input/t.csv")
        a.write_file("/workdir/input/t.csv", "overwrite")  # replaces the link, never writes through
    with backend.create(SMALL) as b:
        b.stage({"t.csv": src})
        assert b.exec("cat input/t.csv").stdout == "original"
    assert src.read_text() == "original"


def test_stage_errors_name_the_problem(sb, tmp_path) -> None:
    with pytest.raises(StagingError, match="orders.csv"):
        sb.stage({"orders.csv": tmp_path / "nope.csv"})
    with pytest.raises(StagingError, match="directory empty"):
        sb.stage({})
    (tmp_path / "x").write_text("x")
    for bad in ("../x", "/abs", ""):
        with pytest.raises(StagingError):
            sb.stage({bad: tmp_path / "x"})


def test_cached_staging_is_fast(backend: LocalBackend, tmp_path) -> None:
    big = tmp_path / "big.csv"
    big.write_bytes(os.urandom(30 * 1024 * 1024))
    with backend.create(SMALL) as a:
        a.stage({"big.csv": big})  # cold: one copy into the cache
    with backend.create(SMALL) as b:
        t = time.perf_counter()
        b.stage({"big.csv": big})
        assert time.perf_counter() - t < 0.05
        assert b.exec("wc -c < input/big.csv").stdout.strip() == str(30 * 1024 * 1024)


# -- lifecycle and fallback ------------------------------------------------------------------


def test_close_removes_everything_and_is_idempotent(backend: LocalBackend) -> None:
    s = backend.create(SMALL)
    s.exec("mkdir -p d && echo x > d/f && chmod 0500 d")
    root = s.root
    s.close()
    s.close()
    assert not root.exists()
    with pytest.raises(SandboxError, match="closed"):
        s.exec("true")


@pytest.mark.parametrize("mount_namespace", [True, False])
def test_rlimits_fallback_warns_and_still_runs(tmp_path, caplog, monkeypatch, mount_namespace):
    if not mount_namespace:  # as a non-root user without bubblewrap: no /workdir at all
        monkeypatch.setattr(MountnsTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    with caplog.at_level(logging.WARNING, logger="dagent.sandbox.local"):
        b = LocalBackend(base_dir=tmp_path, isolation="rlimits")
    if mount_namespace and b.tier != "mountns":
        pytest.skip("no private mount namespace here (not root?)")
    if b.tier == "mountns":  # root without bubblewrap: namespaces, and an unprivileged uid
        assert "commands as an unprivileged uid per sandbox" in b.describe() and b.loopback_only
    else:
        assert "MISSING filesystem isolation, network isolation and pid namespace" in b.describe()
        assert not b.loopback_only
    assert any(b.describe() in rec.getMessage() for rec in caplog.records)
    with b.create(SMALL) as s:
        (tmp_path / "in.csv").write_text("1")
        s.stage({"in.csv": tmp_path / "in.csv"})
        r = s.exec("cat input/in.csv; echo; pwd")
        assert r.ok, r.stderr
        expected = "/workdir" if b.tier == "mountns" else str(s.host_workdir)
        assert r.stdout == f"1\n{expected}\n"
        home = "/root" if b.tier == "mountns" else str(s.host_home)
        assert s.home == home and s.exec("echo $HOME").stdout == f"{home}\n"
        assert s.exec("exit 0").exit_code == 0
        assert s.exec("sleep 5", timeout_s=0.5).timed_out


def test_mountns_sandboxes_see_tools_bound_from_roots_home_and_from_closed_directories(tmp_path):
    """Root without bubblewrap (`mountns`): a tool bound read-only at its own path must be visible to
    the sandbox's unprivileged uid where it lives under /root, which the sandbox's home covers (a
    checkout in root's home: opencode's binary under /root/.../node_modules was "No such file"
    there, a CI clone's only failure), and under a directory other users cannot pass (a 0700
    `mktemp -d`)."""
    import tempfile

    b = LocalBackend(base_dir=tmp_path / "probe", isolation="rlimits")
    if b.tier != "mountns":
        pytest.skip(f"no private mount namespace here (not root?): {b.describe()}")
    in_home = Path(tempfile.mkdtemp(prefix="dagent-tool-", dir=Path("/root")))
    closed = Path(tempfile.mkdtemp(prefix="dagent-closed-"))  # mode 0700
    try:
        tools = {}
        for name, parent in (("home", in_home), ("closed", closed)):
            tool = parent / "node_modules" / "bin"
            tool.mkdir(parents=True)
            (tool / "agent").write_text(f"#!/bin/sh\necho {name}\n")
            (tool / "agent").chmod(0o755)
            tools[name] = tool
        backend = LocalBackend(
            base_dir=tmp_path / "sb", isolation="rlimits", ro_binds=[(str(t), str(t)) for t in tools.values()]
        )
        with backend.create(SMALL) as s:
            for name, tool in tools.items():
                r = s.exec(f"{tool}/agent")
                assert (r.exit_code, r.stdout) == (0, f"{name}\n"), r.stderr
            r = s.exec(f"echo x > {tools['home']}/agent; id -u")
            assert r.stdout.strip() != "0" and (tools["home"] / "agent").read_text().endswith("echo home\n")
    finally:
        shutil.rmtree(in_home, ignore_errors=True)
        shutil.rmtree(closed, ignore_errors=True)


def test_forced_bwrap_without_bwrap_raises(tmp_path, monkeypatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(local.shutil, "which", lambda n: None if n == "bwrap" else real_which(n))
    with pytest.raises(SandboxError, match="bubblewrap"):
        LocalBackend(base_dir=tmp_path, isolation="bwrap")


def test_an_extra_tmp_bind_does_not_hide_a_tool_bound_under_tmp(tmp_path):
    """A Harbor environment binds its own /tmp; a tool (or a venv) living under the host's /tmp
    must stay visible on top of it (a fresh clone under /tmp lost its venv and opencode)."""
    from dagent.sandbox.local import LocalBackend

    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "x").write_text("here")
    backend = LocalBackend(tmp_path / "sb", ro_binds=[(tool, tool)])
    if backend.tier != "bwrap":
        pytest.skip("extra binds need bubblewrap")
    own_tmp = tmp_path / "own-tmp"
    own_tmp.mkdir()
    with backend.create() as sb:
        sb.binds["/tmp"] = own_tmp
        r = sb.exec(f"cat {tool}/x && touch /tmp/made && python -c 'import sys'")
        assert r.exit_code == 0, r.stderr
    assert (own_tmp / "made").exists()
