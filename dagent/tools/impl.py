"""The tools' implementations over ONE sandbox (the surface itself is `dagent.tools.surface`).

Everything goes through the `Sandbox` contract, so the same code serves every backend: `bash`
is one `exec`; `read`, `write` and `edit` use `read_file` / `write_file` on paths already confined
to /workdir (and /workdir/input is refused for writing: the staged tables are read-only);
`grep`, `glob` and `ls` run a constant Python script INSIDE the sandbox, so they see exactly its
filesystem, with their arguments passed through the environment, never interpolated into the
command (F19, F22). Failures are `ToolResult(ok=False)` with text the agent can act on; only a
sandbox that cannot be used raises `SandboxError`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from dagent.core.task import INPUT_DIR, WORKDIR
from dagent.errors import SandboxError
from dagent.sandbox.base import Sandbox
from dagent.tools.surface import ALL_TOOLS, TERMINATOR, Refused, ToolResult, ToolSettings, clip, confine


def _relative(path: str) -> str:
    return "." if path == WORKDIR else path[len(WORKDIR) + 1 :]


def execute(sandbox: Sandbox, name: str, args: Mapping[str, Any], settings: ToolSettings | None = None) -> ToolResult:
    """Run one validated, non-terminator tool call. Raises only SandboxError for an unusable sandbox."""
    settings = settings or ToolSettings()
    try:
        result = _IMPLS[name](sandbox, settings, **args)
    except Refused as e:  # what the call asked for is not allowed: the agent's to fix
        result = ToolResult(False, str(e))
    return ToolResult(result.ok, clip(result.output, settings.output_chars), result.cause)


def _bash(sb: Sandbox, st: ToolSettings, command: str) -> ToolResult:
    if not command.strip():
        return ToolResult(False, "command is empty; give a bash command line")
    r = sb.exec(command, timeout_s=st.command_timeout_s, cwd=WORKDIR)
    out = r.stdout + (("\n" if r.stdout and not r.stdout.endswith("\n") else "") + r.stderr if r.stderr else "")
    cause = None
    if r.timed_out:
        out += f"\n[timed out after {st.command_timeout_s:g}s and was killed]"
        cause = "sandbox_timeout"
    elif r.oom_killed:
        out += "\n[killed: out of memory; process the data in chunks or select fewer columns]"
        cause = "sandbox_oom"
    elif r.exit_code is None:
        out += "\n[no exit code]"
    elif r.exit_code != 0:
        out += f"\n[exit code {r.exit_code}]"
    if not out.strip():
        out = "(no output)"
    return ToolResult(r.ok, out.strip("\n") if r.ok else out.lstrip("\n"), cause)


def _read_text(sb: Sandbox, path: str) -> str | ToolResult:
    """A text file's content, or the ToolResult saying why not (missing, unreadable, binary)."""
    try:
        data = sb.read_file(path)
    except SandboxError as e:  # a directory, a symlink out of /workdir, unreadable
        return ToolResult(False, f"cannot read {path}: {e}")
    if data is None:
        return ToolResult(False, f"no such file: {path} (use ls or glob to see what exists)")
    if b"\0" in data[:8192]:
        return ToolResult(False, f"{path} is a binary file ({len(data):,} bytes); inspect it with bash")
    return data.decode("utf-8", errors="replace")


def _read(sb: Sandbox, st: ToolSettings, path: str, offset: int | None = None, limit: int | None = None) -> ToolResult:
    full = confine(path)
    text = _read_text(sb, full)
    if isinstance(text, ToolResult):
        return text
    lines = text.splitlines()
    start = max(1, offset or 1)
    count = st.read_limit if limit is None or limit <= 0 else limit
    window = lines[start - 1 : start - 1 + count]
    if not lines:
        return ToolResult(True, f"({full} is empty)")
    if not window:
        return ToolResult(False, f"offset {start} is past the end of {full} ({len(lines)} lines)")
    body = "\n".join(f"{start + i:>6}\t{line[:2000]}" for i, line in enumerate(window))
    end = start + len(window) - 1
    if end < len(lines):
        body += f"\n[lines {start}-{end} of {len(lines)}; pass offset={end + 1} to read on]"
    return ToolResult(True, body)


def _writable(path: str) -> str:
    full = confine(path)
    if full == WORKDIR or full == INPUT_DIR or full.startswith(INPUT_DIR + "/"):
        raise Refused(
            f"{full} cannot be written: {INPUT_DIR} holds the read-only inputs; "
            f"write your own files elsewhere under {WORKDIR}"
        )
    return full


def _write(sb: Sandbox, st: ToolSettings, path: str, content: str) -> ToolResult:
    full = _writable(path)
    try:
        sb.write_file(full, content)
    except SandboxError as e:
        return ToolResult(False, f"cannot write {full}: {e}")
    except OSError as e:
        return ToolResult(False, f"cannot write {full}: {e.strerror or e}")
    return ToolResult(True, f"wrote {len(content.encode()):,} bytes to {full}")


def _edit(sb: Sandbox, st: ToolSettings, path: str, old: str, new: str, replace_all: bool = False) -> ToolResult:
    full = _writable(path)
    if old == "":
        return ToolResult(False, "old is empty; give the exact text to replace")
    text = _read_text(sb, full)
    if isinstance(text, ToolResult):
        return text
    n = text.count(old)
    if n == 0:
        return ToolResult(False, f"old text not found in {full}; read the file and copy the text exactly")
    if n > 1 and not replace_all:
        return ToolResult(
            False,
            f"old text occurs {n} times in {full}; include more context to make it unique, or pass replace_all=true",
        )
    result = _write(sb, st, full, text.replace(old, new) if replace_all else text.replace(old, new, 1))
    if not result.ok:
        return result
    return ToolResult(True, f"edited {full}: replaced {n if replace_all else 1} occurrence(s)")


# grep / glob / ls run INSIDE the sandbox, so they see exactly its filesystem. Arguments travel in
# the environment, never interpolated into the command (F19, F22); the script itself is constant.
_FS_SCRIPT = r"""
import fnmatch, glob as G, json, os, re, sys
a = json.loads(os.environ["DAGENT_TOOL_ARGS"])
root = os.path.realpath(".")
def inside(p):
    r = os.path.realpath(p)
    return r == root or r.startswith(root + os.sep)
def show(p):
    p = os.path.normpath(p)
    return "/workdir" if p == "." else "/workdir/" + p
def fail(msg):
    print(msg)
    sys.exit(2)
t = a["path"]
if not os.path.lexists(t):
    fail("no such file or directory: " + show(t))
if not inside(t):
    fail(show(t) + " resolves outside /workdir")
if a["mode"] == "ls":
    if not os.path.isdir(t):
        fail(show(t) + " is not a directory (use read for files)")
    names = sorted(os.listdir(t))
    for n in names:
        p = os.path.join(t, n)
        print(n + "/" if os.path.isdir(p) else "%s\t%d bytes" % (n, os.path.getsize(p) if inside(p) else 0))
    if not names:
        print("(empty directory)")
elif a["mode"] == "glob":
    hits = sorted(p for p in G.glob(os.path.join(t, a["pattern"]), recursive=True) if inside(p))
    for p in hits[:1000]:
        print(show(p) + ("/" if os.path.isdir(p) else ""))
    if not hits:
        print("no files match " + a["pattern"])
        sys.exit(1)
else:
    try:
        rx = re.compile(a["pattern"])
    except re.error as e:
        fail("invalid regular expression %r: %s" % (a["pattern"], e))
    files = [t] if os.path.isfile(t) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(t) for f in fs)
    n = 0
    for f in files:
        if a.get("glob") and not fnmatch.fnmatch(os.path.basename(f), a["glob"]) or not inside(f):
            continue
        try:
            with open(f, "rb") as fh:
                if b"\0" in fh.read(8192):
                    continue
            with open(f, encoding="utf-8", errors="replace") as fh:
                for i, line in enumerate(fh, 1):
                    if rx.search(line):
                        n += 1
                        print("%s:%d:%s" % (show(f), i, line.rstrip("\n")[:300]))
                        if n >= 1000:
                            print("[stopped after 1000 matches]")
                            sys.exit(0)
        except OSError:
            continue
    if not n:
        print("no matches for %r" % a["pattern"])
        sys.exit(1)
"""
_FS_COMMAND = "python3 -I -S -c " + shlex.quote(_FS_SCRIPT)


def _fs(sb: Sandbox, st: ToolSettings, **args: Any) -> ToolResult:
    args["path"] = _relative(confine(args.get("path")))
    r = sb.exec(_FS_COMMAND, timeout_s=st.command_timeout_s, cwd=WORKDIR, env={"DAGENT_TOOL_ARGS": json.dumps(args)})
    if r.timed_out:
        return ToolResult(False, f"timed out after {st.command_timeout_s:g}s; search a smaller path")
    out = (r.stdout + r.stderr).strip("\n")
    if r.exit_code == 1:  # no match is an answer, not an error
        return ToolResult(True, out)
    return ToolResult(r.exit_code == 0, out or "(no output)")


def _grep(sb: Sandbox, st: ToolSettings, pattern: str, path: str | None = None, glob: str | None = None) -> ToolResult:
    return _fs(sb, st, mode="grep", pattern=pattern, path=path, glob=glob)


def _glob(sb: Sandbox, st: ToolSettings, pattern: str, path: str | None = None) -> ToolResult:
    if pattern.startswith("/"):  # an absolute pattern is taken relative to /workdir, never the host
        if not pattern.startswith(WORKDIR + "/"):
            raise Refused(f"pattern {pattern!r} is outside {WORKDIR}: use a pattern like '**/*.csv'")
        pattern, path = pattern[len(WORKDIR) + 1 :], None
    if ".." in pattern.split("/"):
        raise Refused(f"pattern {pattern!r} climbs out of the search directory: drop the '..'")
    return _fs(sb, st, mode="glob", pattern=pattern, path=path)


def _ls(sb: Sandbox, st: ToolSettings, path: str | None = None) -> ToolResult:
    return _fs(sb, st, mode="ls", path=path)


_IMPLS: dict[str, Callable[..., ToolResult]] = {
    "bash": _bash,
    "read": _read,
    "write": _write,
    "edit": _edit,
    "grep": _grep,
    "glob": _glob,
    "ls": _ls,
}
assert set(_IMPLS) | {TERMINATOR} == set(ALL_TOOLS)  # every declared tool has one implementation
