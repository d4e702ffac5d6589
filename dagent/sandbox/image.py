"""What a sandbox image must hold for the suite's tasks, pinned from this environment.

The golds were measured by running each task's reference program in the local sandbox, with this
interpreter and these package versions; an image built elsewhere (a Harbor task's Dockerfile, the
E2B template) pins the same ones, so a program prints there what it printed here.
`imported_modules` reads what the reference programs import, so a test can check that every one is
in the image (a module missing there would fail every task that needs it as a wrong answer).
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from collections.abc import Iterable, Sequence

from dagent.errors import ConfigError

__all__ = [
    "OPENCODE_PACKAGE",
    "OPENCODE_VERSION",
    "PI_PACKAGE",
    "PI_VERSION",
    "TABLE_PACKAGES",
    "distributions_of",
    "imported_modules",
    "pins",
    "python_version",
]

TABLE_PACKAGES = ("pandas", "numpy", "pyarrow")  # what the local sandbox offers a program for tables

# The agent harnesses an image (or scripts/setup.sh, which reads these two lines) installs from npm:
# one definition of each pin.
OPENCODE_VERSION = "1.18.33"
PI_VERSION = "0.73.1"
OPENCODE_PACKAGE = f"opencode-ai@{OPENCODE_VERSION}"
PI_PACKAGE = f"@mariozechner/pi-coding-agent@{PI_VERSION}"


def python_version(micro: bool = True) -> str:
    """This interpreter's version (`3.11.2`, or `3.11`): the one the golds were measured with."""
    v = sys.version_info
    return f"{v.major}.{v.minor}.{v.micro}" if micro else f"{v.major}.{v.minor}"


def pins(packages: Sequence[str]) -> list[str]:
    """`name==version` for each package, read from this environment (the one that built the golds)."""
    try:
        return [f"{name}=={importlib.metadata.version(name)}" for name in packages]
    except importlib.metadata.PackageNotFoundError as e:
        raise ConfigError(
            f"cannot pin {e.name}: install dagent with its dependencies (bash scripts/setup.sh) first"
        ) from e


def imported_modules(programs: Iterable[str]) -> set[str]:
    """Top-level modules the programs import, standard library left out."""
    found: set[str] = set()
    for source in programs:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names}


def distributions_of(modules: Iterable[str]) -> dict[str, set[str]]:
    """module -> the installed distributions that provide it (empty: none here)."""
    table = importlib.metadata.packages_distributions()
    return {m: {d.lower() for d in table.get(m, ())} for m in modules}
