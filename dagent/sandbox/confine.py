"""The `landlock` tier's launcher: confine a command with Landlock and seccomp, no namespaces needed.

Where a container has no user namespaces and is not root (a hosted Space, Docker's default
runtime as uid 1000), nothing can be mounted or unshared, but an unprivileged process can still
restrict ITSELF and everything it starts, for good: Linux Landlock (filesystem, TCP, signal and
abstract-socket scoping) and a seccomp filter (what Landlock does not see). This file runs as

    python -I -S confine.py SPEC_JSON -- bash -c COMMAND

(standard library only, so it starts in milliseconds under any interpreter), and does:

1. no_new_privs; a child subreaper (orphans of the sandbox come back to it); death of its parent
   (the server) kills it.
2. Its own Landlock domain, scoping signals and abstract Unix sockets only: it can signal what it
   starts, nothing started outside can signal into it except the server (outside the domain,
   Landlock does not restrict the server), and `kill(-1)` from here reaches exactly this sandbox.
3. Forks the command into a NESTED domain: read-only the system and the interpreter, read-write
   only the sandbox's directories, REFER only between them (nothing linked or renamed in from
   outside), TCP connect only to the allowed ports, no TCP bind, signals and abstract sockets
   scoped; then the seccomp filter (TCP must be plain TCP: MPTCP and SCTP pass Landlock's port
   rules, F53; no UDP, netlink, packet or Unix sockets, io_uring, SysV IPC, ptrace, metadata
   changes (chmod, chown, utime, xattr: Landlock does not govern them, F54), x32 and foreign
   architectures killed).
4. Waits, watching the sandbox's summed resident memory and its directories' size (no cgroups
   here); on exit of the command, a watchdog kill, or SIGTERM, kills every process of its domain.

Strict, never best effort: a kernel below `MIN_ABI` (6: TCP rules and scoping) is refused by
`landlock_abi()` with the cause; nothing is silently dropped. Known gap (documented, probed): a
Landlock TCP rule is per port, on every address; the servers keep the allowed port a random high
one. The sandbox's processes run as the server's uid: what keeps the suite out of reach is that
no rule covers it, not its mode.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import select
import signal
import struct
import sys
import time

MIN_ABI = 6
WORKDIR_FD = 1023  # /workdir -> /proc/self/fd/1023 resolves, in each sandboxed process, to its own
WORKDIR_LINK = f"/proc/self/fd/{WORKDIR_FD}"

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same number on every architecture
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 38, 22, 1, 36
_SECCOMP_MODE_FILTER = 2
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_O_PATH = getattr(os, "O_PATH", 0o10000000)

# filesystem rights by the ABI that brought them
_FS = {
    "execute": (1 << 0, 1),
    "write_file": (1 << 1, 1),
    "read_file": (1 << 2, 1),
    "read_dir": (1 << 3, 1),
    "remove_dir": (1 << 4, 1),
    "remove_file": (1 << 5, 1),
    "make_char": (1 << 6, 1),
    "make_dir": (1 << 7, 1),
    "make_reg": (1 << 8, 1),
    "make_sock": (1 << 9, 1),
    "make_fifo": (1 << 10, 1),
    "make_block": (1 << 11, 1),
    "make_sym": (1 << 12, 1),
    "refer": (1 << 13, 2),
    "truncate": (1 << 14, 3),
    "ioctl_dev": (1 << 15, 5),
}
_NET_BIND, _NET_CONNECT = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_READ = ("execute", "read_file", "read_dir")
_WRITE = tuple(n for n in _FS if n not in ("make_char", "make_block"))  # no device nodes, even as root
_DEVICE = ("read_file", "write_file", "truncate", "ioctl_dev")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class ConfineError(OSError):
    """A confinement step the kernel refused: its message names the cause and the fix."""


def _syscall(*args: int | ctypes.c_void_p | None) -> int:
    r = _libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or ConfineError naming why there is none (or too old)."""
    try:
        abi = _syscall(_SYS_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    except OSError as e:
        why = {
            errno.ENOSYS: "this kernel was built without Landlock (CONFIG_SECURITY_LANDLOCK)",
            errno.EOPNOTSUPP: "Landlock is built in but disabled at boot (add landlock to the lsm= kernel parameter)",
            errno.EPERM: "a seccomp profile older than Landlock refuses its system calls (update the "
            "container runtime, or its seccomp profile)",
        }.get(e.errno, f"errno {e.errno}")
        raise ConfineError(e.errno, f"Landlock is unavailable: {why}") from None
    if abi < MIN_ABI:
        raise ConfineError(
            errno.EOPNOTSUPP,
            f"Landlock ABI {abi} is below {MIN_ABI} (Linux 6.12): it has no "
            "TCP rules or signal scoping; run on a newer kernel",
        )
    return abi


def _rights(names: tuple[str, ...], abi: int) -> int:
    return sum(bit for name, (bit, since) in _FS.items() if name in names and since <= abi)


def _restrict(abi: int, paths: dict[str, int], ports: list[int], fs: bool) -> None:
    """One Landlock domain: `paths` {path: rights} (fs=False: no filesystem or network rules at all,
    scoping only), TCP connect to `ports`, then enforced on this thread for good."""
    handled_fs = _rights(tuple(_FS), abi) if fs else 0
    handled_net = (_NET_BIND | _NET_CONNECT) if fs else 0
    attr = struct.pack("QQQ", handled_fs, handled_net, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    rs = _syscall(_SYS_CREATE, ctypes.cast(buf, ctypes.c_void_p), len(attr), 0)
    try:
        for path, rights in paths.items():
            try:
                fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not os.path.isdir(path):  # a file rule takes file rights only
                    rights &= _rights(("execute", "read_file", "write_file", "truncate", "ioctl_dev"), abi)
                rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & handled_fs, fd), 12)
                _syscall(_SYS_ADD_RULE, rs, _RULE_PATH_BENEATH, ctypes.cast(rule, ctypes.c_void_p), 0)
            finally:
                os.close(fd)
        for port in ports:
            rule = ctypes.create_string_buffer(struct.pack("QQ", _NET_CONNECT, port), 16)
            _syscall(_SYS_ADD_RULE, rs, _RULE_NET_PORT, ctypes.cast(rule, ctypes.c_void_p), 0)
        _syscall(_SYS_RESTRICT, rs, 0)
    finally:
        os.close(rs)


# -- seccomp ---------------------------------------------------------------------------------------
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
# x86-64 numbers: denied with EPERM (chmod/chown/utime/xattr families, ptrace and process memory,
# SysV IPC, io_uring, kernel keyrings, bpf, perf, userfaultfd, and the *at2 variants)
_DENY_X86_64 = {
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "fchmodat2": 452,
    "chown": 92,
    "fchown": 93,
    "lchown": 94,
    "fchownat": 260,
    "utime": 132,
    "utimes": 235,
    "futimesat": 261,
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "removexattr": 197,
    "lremovexattr": 198,
    "fremovexattr": 199,
    "setxattrat": 463,
    "removexattrat": 466,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "pidfd_getfd": 438,
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "shmdt": 67,
    "semget": 64,
    "semop": 65,
    "semctl": 66,
    "semtimedop": 220,
    "msgget": 68,
    "msgsnd": 69,
    "msgrcv": 70,
    "msgctl": 71,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "mount_setattr": 442,
    "open_by_handle_at": 304,
}
_SOCKET_X86_64, _UTIMENSAT_X86_64 = 41, 280
_AF_INET, _AF_INET6, _SOCK_STREAM, _IPPROTO_TCP = 2, 10, 1, 6
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The filter as classic BPF (code, jt, jf, k), for x86-64; ConfineError elsewhere."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise ConfineError(
            errno.EOPNOTSUPP,
            f"the landlock tier's seccomp filter knows x86-64 system call "
            f"numbers only, not {platform.machine()}: use bubblewrap here",
        )
    eperm, eacces = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.EACCES
    # (code, jump-if-true label or offset, jump-if-false label or offset, k); labels resolved below
    prog: list[tuple[int, int | str, int | str, int]] = [
        (_LD_W_ABS, 0, 0, 4),
        (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),  # arch
        (_LD_W_ABS, 0, 0, 0),
        (_JGE_K, 0, 1, _X32_BIT),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),  # nr; no x32
        *[(_JEQ_K, "deny", 0, nr) for nr in sorted(set(_DENY_X86_64.values()))],
        (_JEQ_K, "socket", 0, _SOCKET_X86_64),
        (_JEQ_K, "utimensat", 0, _UTIMENSAT_X86_64),
        (_RET_K, 0, 0, _RET_ALLOW),
        # socket(domain, type, protocol): AF_INET(6), SOCK_STREAM, protocol 0 or TCP (never MPTCP, SCTP)
        ("socket", 0, 0, 0),
        (_LD_W_ABS, 0, 0, 16),
        (_JEQ_K, 1, 0, _AF_INET),
        (_JEQ_K, 0, "refuse", _AF_INET6),
        (_LD_W_ABS, 0, 0, 24),
        (_AND_K, 0, 0, 0xF),
        (_JEQ_K, 0, "refuse", _SOCK_STREAM),
        (_LD_W_ABS, 0, 0, 32),
        (_JEQ_K, "allow", 0, 0),
        (_JEQ_K, "allow", "refuse", _IPPROTO_TCP),
        # utimensat(fd, path, times, flags) with times NULL ("now", what `touch` does): allowed
        ("utimensat", 0, 0, 0),
        (_LD_W_ABS, 0, 0, 32),
        (_JEQ_K, 0, "deny", 0),
        (_LD_W_ABS, 0, 0, 36),
        (_JEQ_K, "allow", "deny", 0),
        ("allow", 0, 0, 0),
        ("deny", 0, 0, 0),
        ("refuse", 0, 0, 0),  # jumps go forward only
    ]
    returns = {"allow": _RET_ALLOW, "deny": eperm, "refuse": eacces}
    where: dict[str, int] = {}
    body: list[tuple[int | str, int | str, int | str, int]] = []
    for ins in prog:
        if isinstance(ins[0], str):
            where[ins[0]] = len(body)
            if ins[0] in returns:
                body.append((_RET_K, 0, 0, returns[ins[0]]))
        else:
            body.append(ins)
    out = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt, jf = (where[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ConfineError(errno.EINVAL, "the seccomp program's jumps do not fit (a bug in dagent)")
        out.append((int(code), jt, jf, k))
    return out


def _install_seccomp() -> None:
    prog = seccomp_program()
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
        e = ctypes.get_errno()
        raise ConfineError(e, f"installing the seccomp filter failed: {os.strerror(e)}")


# -- the launcher ----------------------------------------------------------------------------------
def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise ConfineError(e, f"prctl({option}) failed: {os.strerror(e)}")


def _drop_capabilities() -> None:
    """As root (a container's default user), keep uid 0 but no capability, now or after exec: empty
    bounding set, then empty effective, permitted and inheritable sets. Without CAP_DAC_OVERRIDE root
    respects file modes (a read-only staged input stays read-only); without CAP_MKNOD, no devices."""
    if os.geteuid() != 0:
        return
    for cap in range(64):
        if _libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:  # PR_CAPBSET_DROP
            break
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0), 8)  # _LINUX_CAPABILITY_VERSION_3
    data = ctypes.create_string_buffer(bytes(24), 24)  # two {effective, permitted, inheritable} words
    _syscall(126, ctypes.cast(header, ctypes.c_void_p), ctypes.cast(data, ctypes.c_void_p))  # capset (x86-64)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _rss_mb(pids: list[int]) -> float:
    page, total = os.sysconf("SC_PAGE_SIZE"), 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total * page / 2**20


def _size_mb(dirs: list[str]) -> float:
    total = 0
    for top in dirs:
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:
                    continue
    return total / 2**20


def main(argv: list[str]) -> int:
    spec, command = json.loads(argv[1]), argv[3:]
    abi = landlock_abi()
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != spec.get("parent", os.getppid()):  # the server died before PDEATHSIG was set
        return 125
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _restrict(abi, {}, [], fs=False)  # the launcher's own domain: scoping only
    try:  # kill(-1) below must reach this sandbox only: prove the scope holds before relying on it
        os.kill(os.getppid(), 0)
        scoped = False
    except PermissionError:
        scoped = True
    ro, rw, dev = spec["read_only"], spec["read_write"], spec.get("devices", [])
    paths = {p: _rights(_READ, abi) for p in ro}
    paths.update({p: _rights(_DEVICE, abi) for p in dev})
    paths.update({p: _rights(_WRITE, abi) for p in rw})
    wd = os.open(spec["workdir"], _O_PATH | os.O_DIRECTORY)
    if wd != WORKDIR_FD:
        os.dup2(wd, WORKDIR_FD, inheritable=True)
        os.close(wd)
    os.set_inheritable(WORKDIR_FD, True)
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.setsid()
            if spec.get("nproc"):
                resource.setrlimit(resource.RLIMIT_NPROC, (int(spec["nproc"]),) * 2)
            _drop_capabilities()
            _restrict(abi, paths, [int(p) for p in spec.get("tcp_connect", [])], fs=True)
            _install_seccomp()
            os.execvp(command[0], command)
        except BaseException as e:  # noqa: BLE001 - reported as the setup failure it is
            os.write(2, f"dagent-sandbox: setup failed: {e}\n".encode())
            os._exit(125)
    stop = {"why": None}

    def on_term(signum: int, frame: object) -> None:
        stop["why"] = "terminated"

    signal.signal(signal.SIGTERM, on_term)
    limits = {
        "memory": float(spec.get("memory_mb") or 0),
        "disk": float(spec.get("disk_mb") or 0),
        "processes": float(spec.get("max_processes") or 0),
    }
    status, last_disk = None, 0.0
    poller = select.poll()
    pidfd = os.pidfd_open(pid)
    poller.register(pidfd, select.POLLIN)
    while stop["why"] is None:
        poller.poll(250)  # wakes at the child's exit; a watchdog tick otherwise
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        tree = [pid, *_descendants(pid)]
        if limits["processes"] and len(tree) > limits["processes"]:
            stop["why"] = "processes"
        elif limits["memory"] and _rss_mb(tree) > limits["memory"]:
            stop["why"] = "memory"
        elif limits["disk"] and time.monotonic() - last_disk > 2:
            last_disk = time.monotonic()
            if _size_mb(rw) > limits["disk"]:
                stop["why"] = "disk"
    _reap(scoped)
    if status is None:
        why = stop["why"]
        if why in limits:
            os.write(
                2,
                f"\ndagent-sandbox: killed: the sandbox's {why} went past its limit "
                f"({limits[why]:.0f}{'' if why == 'processes' else ' MB'})\n".encode(),
            )
        return 137
    return os.waitstatus_to_exitcode(status)


def _reap(scoped: bool) -> None:
    """Kill everything in this domain (the sandbox, whatever it daemonised) and collect it. Where the
    signal scope did not hold (`scoped` False: it could signal the server), never kill(-1): that
    would reach every process of this uid; kill what descends from it instead (orphans come back
    to it, a subreaper, so they descend from it too)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for _ in range(50):
        for target in [-1] if scoped else _descendants(os.getpid()):
            try:
                os.kill(target, signal.SIGKILL)  # -1, scoped: this launcher's domain and the nested one
            except (ProcessLookupError, PermissionError):
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.01)


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except ConfineError as e:
        os.write(2, f"dagent-sandbox: setup failed: {e.strerror}\n".encode())
        code = 125
    code = 128 - code if code < 0 else code
    sys.exit(code)
