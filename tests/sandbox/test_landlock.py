"""The `landlock` tier (`dagent.sandbox.confine`): Landlock + seccomp, no namespaces, the server's uid.

Forced here with `isolation="landlock"` (this machine has bubblewrap, and runs the tests as root:
the launcher drops every capability, so root inside is as bound by file modes as uid 1000 is).
Every probe of the self-check is refused; the destructive ones the self-check does not run at
start-up (`kill -9 -1`, more processes than the budget, memory past the limit) are run here, with
the server and a second sandbox surviving each; a fault planted in a copy of the launcher (the
socket rule, the chmod rule, signal scoping: F53, F54) makes its probe escape. A kernel without
Landlock, or below ABI 6, is refused with its cause (the kernel's answer faked).
Not covered here: `/workdir` as the per-process link (this host has a real /workdir; the images'
test runs it), uid 1000 under Docker's default runtime (tests/spaces).
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from pathlib import Path

import pytest

from dagent.errors import ConfigError, SandboxError
from dagent.sandbox import confine
from dagent.sandbox.base import Resources
from dagent.sandbox.isolation import PROBES, check_isolation
from dagent.sandbox.local import LocalBackend
from dagent.sandbox.tiers import landlock as landlock_tier
from dagent.sandbox.tiers.bwrap import BwrapTier
from dagent.sandbox.tiers.mountns import MountnsTier


def _landlock(tmp_path, name: str = "ll", **kw) -> LocalBackend:
    try:
        return LocalBackend(base_dir=tmp_path / name, isolation="landlock", **kw)
    except SandboxError as e:
        pytest.skip(f"no landlock tier on this kernel: {e}")


def test_every_probe_is_refused_and_a_task_still_solves(tmp_path, open_suite):
    backend = _landlock(tmp_path)
    assert backend.tier == "landlock" and not backend.loopback_only and "Landlock" in backend.describe()
    report = check_isolation(backend, suite_dir=open_suite)
    assert [p.name for p in report.probes] == [
        p for p in PROBES if p != "server_port6" or "server_port6" in {q.name for q in report.probes}
    ]
    assert report.ok, report.summary()
    table = tmp_path / "t.csv"
    table.write_text("x,y\n1,2\n3,4\n")
    with backend.create(Resources(timeout_s=60)) as sb:
        sb.stage({"t.csv": table})
        r = sb.exec(
            "python3 -c \"import pandas as pd; print(pd.read_csv('input/t.csv').y.sum())\" > answer.txt"
            " && cat answer.txt && touch made && echo $TMPDIR && ! echo x >> input/t.csv"
        )
        assert r.exit_code == 0 and r.stdout.splitlines() == ["6", str(sb.host_tmp)], r.stderr
        assert sb.read_file("answer.txt") == b"6\n"
        assert table.read_text() == "x,y\n1,2\n3,4\n"  # the staged input stayed read-only
        r = sb.exec("echo x > /tmp/dagent-ll-probe; chmod +x answer.txt")
        assert "Permission denied" in r.stderr and "Operation not permitted" in r.stderr
        assert not Path("/tmp/dagent-ll-probe").exists()


def test_kill_minus_one_reaches_only_its_own_sandbox(tmp_path):
    backend = _landlock(tmp_path)
    server_side = subprocess.Popen(["sleep", "60"])  # a process of the server's uid, outside
    try:
        with backend.create(Resources(timeout_s=60)) as a, backend.create(Resources(timeout_s=60)) as b:
            # guard: signal 0 first; only where it is refused is the real `kill -9 -1` run
            assert a.exec(f"kill -0 {server_side.pid}").exit_code != 0
            survivor: dict[str, object] = {}
            t = threading.Thread(target=lambda: survivor.update(r=b.exec("sleep 3; echo survived")))
            t.start()
            r = a.exec("sleep 60 & sleep 0.5; kill -9 -1; echo done")
            t.join()
            assert r.stdout.strip() == "done" or r.exit_code == 137, (r.stdout, r.stderr)
            assert survivor["r"].stdout.strip() == "survived"  # type: ignore[union-attr]
            assert server_side.poll() is None
    finally:
        server_side.kill()
        server_side.wait()


def test_more_processes_than_the_budget_are_killed_and_others_survive(tmp_path):
    backend = _landlock(tmp_path)
    with backend.create(Resources(timeout_s=60, max_processes=48)) as a, backend.create(Resources(timeout_s=60)) as b:
        spawn = "import subprocess, time; [subprocess.Popen(['sleep', '30']) for _ in range(400)]; time.sleep(30)"
        r = a.exec(f'python3 -c "{spawn}"', timeout_s=40)
        # RLIMIT_NPROC refuses the fork (EAGAIN), or the watchdog kills the sandbox first: never 400
        assert not r.timed_out and r.exit_code != 0, (r.exit_code, r.stderr[-300:])
        assert "Resource temporarily unavailable" in r.stderr or (
            r.exit_code == 137 and "processes went past its limit" in r.stderr
        ), r.stderr[-300:]
        assert b.exec("echo alive").stdout == "alive\n"
    assert not _sleepers_left()


def _sleepers_left() -> list[str]:
    out = subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True, text=True).stdout
    return out.split()


def test_memory_past_the_limit_is_killed_summed_over_processes(tmp_path):
    backend = _landlock(tmp_path)
    backend.cgroups = ()  # as in a container: no cgroup to create, RLIMIT_AS and the watchdog only
    grab = "python3 -c 'import time; b = bytearray(120 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(20)'"
    with backend.create(Resources(timeout_s=60, memory_mb=300)) as sb:
        one = sb.exec("python3 -c 'b = bytearray(900 << 20)'")  # one process: RLIMIT_AS refuses it
        assert one.oom_killed and "MemoryError" in one.stderr
        many = sb.exec(f"for i in 1 2 3 4; do {grab} & done; wait", timeout_s=40)  # each fits, the sum does not
        assert many.exit_code == 137 and many.oom_killed and not many.timed_out, many.stderr[-300:]
        assert "memory went past its limit" in many.stderr


def _planted(tmp_path, monkeypatch, old: str, new: str) -> None:
    """Sandboxes started from now on use a copy of the launcher with `old` replaced by `new`."""
    source = Path(confine.__file__).read_text()
    assert source.count(old) == 1, old
    copy = tmp_path / "confine_planted.py"
    copy.write_text(source.replace(old, new))
    monkeypatch.setattr(landlock_tier, "LAUNCHER", str(copy))


@pytest.mark.failure_mode("F53")
def test_without_the_socket_rule_mptcp_and_other_sockets_escape(tmp_path, open_suite, monkeypatch):
    backend = _landlock(tmp_path)
    _planted(tmp_path, monkeypatch, '        (_JEQ_K, "socket", 0, _SOCKET_X86_64),\n', "")
    escaped = {p.name for p in check_isolation(backend, suite_dir=open_suite).escapes()}
    assert {"unix_path", "netlink", "outside"} <= escaped  # UDP, netlink, pathname sockets: not Landlock's
    assert not {"server_port", "unix_abstract"} & escaped  # plain TCP and abstract sockets: Landlock's
    mptcp_here = subprocess.run(["sysctl", "-n", "net.mptcp.enabled"], capture_output=True, text=True).stdout.strip()
    assert ("mptcp" in escaped) == (mptcp_here == "1")  # MPTCP passes the TCP port rule (F53)


@pytest.mark.failure_mode("F54")
def test_without_the_metadata_rule_or_signal_scoping_the_server_is_reachable(tmp_path, open_suite, monkeypatch):
    backend = _landlock(tmp_path)
    _planted(
        tmp_path, monkeypatch, '    "chmod": 90,\n    "fchmod": 91,\n    "fchmodat": 268,\n    "fchmodat2": 452,\n', ""
    )
    assert {p.name for p in check_isolation(backend, suite_dir=open_suite).escapes()} == {"chmod_suite"}
    _planted(tmp_path, monkeypatch, "_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)", "_SCOPE_ABSTRACT_UNIX)")
    escaped = {p.name for p in check_isolation(backend, suite_dir=open_suite).escapes()}
    assert "signal" in escaped and "ptrace" not in escaped  # Landlock always bounds ptrace; seccomp too


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (errno.ENOSYS, "built without Landlock"),
        (errno.EOPNOTSUPP, "disabled at boot"),
        (errno.EPERM, "seccomp profile older than Landlock"),
        (5, "ABI 5 is below 6"),
    ],
)
def test_a_kernel_without_landlock_or_below_abi_6_is_refused_with_its_cause(tmp_path, monkeypatch, answer, cause):
    real = confine._syscall

    def kernel(*args):
        if args[0] == 444 and args[1] is None:  # landlock_create_ruleset(NULL, 0, VERSION)
            if answer == 5:
                return 5
            raise OSError(answer, os.strerror(answer))
        return real(*args)

    monkeypatch.setattr(confine, "_syscall", kernel)
    with pytest.raises(SandboxError, match=cause) as e:
        LocalBackend(base_dir=tmp_path / "ll", isolation="landlock")
    assert "bubblewrap where user namespaces are allowed" in str(e.value)
    # auto: the ladder passes over it, and says why, rather than pretending
    monkeypatch.setattr(BwrapTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    monkeypatch.setattr(MountnsTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    b = LocalBackend(base_dir=tmp_path / "auto")
    assert b.tier == "cwd" and cause.split()[0] in b.landlock_why


def test_the_ladder_and_dagent_isolation_choose_it(tmp_path, monkeypatch):
    _landlock(tmp_path, "first")  # skips where this kernel has no tier
    monkeypatch.setattr(BwrapTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    monkeypatch.setattr(MountnsTier, "probe", classmethod(lambda cls, backend: "forced off by the test"))
    assert LocalBackend(base_dir=tmp_path / "auto").tier == "landlock"  # bwrap -> mountns -> landlock
    monkeypatch.undo()
    monkeypatch.setenv("DAGENT_ISOLATION", "landlock")
    assert LocalBackend(base_dir=tmp_path / "env").tier == "landlock"
    monkeypatch.setenv("DAGENT_ISOLATION", "chroot")
    with pytest.raises(ConfigError, match="unknown isolation 'chroot'.*landlock"):
        LocalBackend(base_dir=tmp_path / "bad")


def test_the_seccomp_program_fits_and_ends_in_returns():
    prog = confine.seccomp_program()
    assert len(prog) < 256
    returns = [k for code, _, _, k in prog if code == 0x06]
    assert prog[-1][0] == 0x06 and confine._RET_ALLOW in returns and confine._RET_KILL_PROCESS in returns
    for i, (code, jt, jf, _) in enumerate(prog):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert i + 1 + max(jt, jf) < len(prog)


def test_the_allowed_port_is_the_only_one_and_the_known_gap_is_any_address(tmp_path):
    """The capture proxy's port is reachable (on any address of this host: Landlock's TCP rules are per
    port, the documented gap); a port next to it is not."""
    import socket

    backend = _landlock(tmp_path)
    listeners = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
        s.listen(8)
        listeners.append(s)
    allowed, other = (s.getsockname()[1] for s in listeners)
    backend.allow_tcp(allowed)
    probe = (
        'python3 -c "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2); '
        "print('connected')\" {} {}"
    )
    try:
        with backend.create(Resources(timeout_s=30)) as sb:
            assert sb.exec(probe.format("127.0.0.1", allowed)).stdout.strip() == "connected"
            assert sb.exec(probe.format("127.0.0.2", allowed)).stdout.strip() == "connected"  # the gap
            denied = sb.exec(probe.format("127.0.0.1", other))
            assert denied.exit_code != 0 and "Permission denied" in denied.stderr, denied.stderr[-300:]
            bind = sb.exec("python3 -c \"import socket; socket.socket().bind(('127.0.0.1', 0))\"")
            assert bind.exit_code != 0 and "Permission denied" in bind.stderr  # no listening either
    finally:
        for s in listeners:
            s.close()


def test_a_sandbox_whose_directories_outgrow_their_limit_is_killed(tmp_path):
    backend = _landlock(tmp_path)
    with backend.create(Resources(timeout_s=60, max_file_mb=2)) as sb:  # 4 x 2 MB for its directories
        r = sb.exec("for i in 1 2 3 4 5 6; do head -c 1500000 /dev/zero > f$i; done; sleep 10", timeout_s=30)
        assert r.exit_code == 137 and not r.timed_out and "disk went past its limit" in r.stderr, r.stderr[-300:]
