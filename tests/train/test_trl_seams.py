"""The TRL seams: each resolves in the installed TRL, the release guard refuses another TRL naming
its range, and no dagent module reaches a private TRL name the list does not hold (the scanner
itself is checked on planted sources)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("trl")

from dagent.train import trl_seams  # noqa: E402
from dagent.train.trl_seams import SEAMS, TRLVersionError, check_trl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAMES = {s.name for s in SEAMS}


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.attr)
def test_each_seam_resolves_in_the_installed_trl_and_its_users_take_it_from_here(seam):
    assert seam.resolve() is not None
    for user in seam.users:
        source = (ROOT / (user.replace(".", "/") + ".py")).read_text()
        assert "dagent.train.trl_seams" in source, f"{user} touches {seam.attr} without the release guard"


def test_the_guard_refuses_a_release_outside_the_range_naming_it():
    low, high = trl_seams.TRL_RANGE
    assert check_trl(low) == low
    for other in ("1.15.9", high, "2.0.0", "1.17.0.dev0"):
        with pytest.raises(
            TRLVersionError, match=rf"trl {other} is installed.*>= {low}, < {high}.*_generate_single_turn"
        ):
            check_trl(other)


def test_the_guard_runs_at_import(monkeypatch):
    import importlib
    import importlib.metadata

    from dagent.errors import ConfigError

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9" if name == "trl" else "0")
    with pytest.raises(ConfigError, match="trl 9.9.9") as refused:  # the reloaded module's own error class
        importlib.reload(trl_seams)
    assert type(refused.value).__name__ == "TRLVersionError"
    monkeypatch.undo()
    importlib.reload(trl_seams)


def private_trl_names(source: str) -> set[str]:
    """The private names a dagent module reaches in TRL: `trainer._x`, `super()._x`, `utils._x`
    (trl.trainer.utils), getattr/setattr/delattr/hasattr(trainer, "_x"), `from trl... import _x`,
    and methods `_x` of a class made inside a function (the dynamic subclasses of TRL's trainers)."""
    tree = ast.parse(source)
    found: set[str] = set()

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            base = node.value
            if (isinstance(base, ast.Name) and base.id in ("trainer", "utils")) or (
                isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"
            ):
                found.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "delattr", "hasattr")
            and len(node.args) >= 2
        ):
            target, name = node.args[0], node.args[1]
            if (
                isinstance(target, ast.Name)
                and target.id == "trainer"
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and private(name.value)
            ):
                found.add(name.value)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trl"):
            found |= {a.name for a in node.names if private(a.name)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ClassDef):
                    found |= {f.name for f in inner.body if isinstance(f, ast.FunctionDef) and private(f.name)}
    return found


def test_the_scanner_finds_each_kind_of_reach_it_names():
    planted = """
from trl.trainer.utils import _hidden_helper
def f(trainer, utils):
    trainer._new_private()
    getattr(trainer, "_by_name")
    utils._module_level = 1
    class Sub(Base):
        def _overridden(self):
            return super()._called_up()
"""
    assert private_trl_names(planted) == {
        "_hidden_helper",
        "_new_private",
        "_by_name",
        "_module_level",
        "_overridden",
        "_called_up",
    }


def test_no_dagent_module_reaches_a_private_trl_name_the_seams_do_not_hold():
    """Every module of dagent/train (the one room that trains with TRL) and any other that imports trl."""
    unlisted = {}
    for path in sorted((ROOT / "dagent").rglob("*.py")):
        imports_trl = re.search(r"^\s*(from|import) trl\b", path.read_text(), re.MULTILINE)
        if path.relative_to(ROOT / "dagent").parts[0] != "train" and not imports_trl:
            continue
        names = private_trl_names(path.read_text()) - NAMES
        if names:
            unlisted[str(path.relative_to(ROOT))] = sorted(names)
    assert unlisted == {}, f"list these in dagent.train.trl_seams.SEAMS (or stop reaching them): {unlisted}"
