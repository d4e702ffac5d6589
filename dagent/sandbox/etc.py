"""The allow-listed copy of /etc a local sandbox binds read-only, as one mount: what a program needs
(certificates, users, resolver and locale files, Python's own) and nothing else of the host's
configuration. Built once per content (a digest of the entries names it) and shared by sandboxes;
a server running unprivileged (uid 1000 in a Space) copies what it can read (`/etc/ssl/private`
is left out rather than failing the copy)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

ETC_ENTRIES = _ETC = (
    "alternatives",
    "ca-certificates",
    "ssl",
    "passwd",
    "group",
    "hosts",
    "hostname",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "magic",
    "magic.mime",
    "fonts",
    "inputrc",
    "terminfo",
    "python3",
    "python3.11",
    "xdg",
)


def _unreadable(folder: str, names: list[str]) -> list[str]:
    """What an unprivileged server cannot read (`/etc/ssl/private` as uid 1000): left out of the copy."""
    return [
        n
        for n in names
        if not os.access(os.path.join(folder, n), os.R_OK) and not os.path.islink(os.path.join(folder, n))
    ]


def _readable_tree(root: Path) -> list[Path]:
    """Every entry under `root` this process can list, sorted; unreadable folders skipped."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, onerror=lambda _e: None):
        dirs[:] = [d for d in dirs if d not in _unreadable(folder, dirs)]
        found += [Path(folder, n) for n in (*dirs, *files)]
    return sorted(found)


def etc_copy(base_dir: Path) -> Path:
    """An allow-listed copy of /etc, bound as one mount (one mount, not one bind per entry)."""
    entries = [Path("/etc", n) for n in _ETC if os.path.lexists(f"/etc/{n}") and os.access(f"/etc/{n}", os.R_OK)]
    stamp = hashlib.sha256()
    for e in entries:
        for p in [e, *(_readable_tree(e) if e.is_dir() and not e.is_symlink() else [])]:
            st = p.lstat()
            stamp.update(f"{p}\0{st.st_mtime_ns}\0{st.st_size}\0".encode())
    final = base_dir / f".etc-{stamp.hexdigest()[:16]}"
    if not final.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".etc-tmp-", dir=base_dir))
        for e in entries:
            if e.is_dir() and not e.is_symlink():
                shutil.copytree(e, tmp / e.name, symlinks=True, ignore=_unreadable)
            else:
                shutil.copy2(e, tmp / e.name, follow_symlinks=False)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:  # another backend built it first
            shutil.rmtree(tmp)
    return final
