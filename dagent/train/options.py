"""Every option reaches every launch path, or that path refuses it (F59).

A training job's options are one dataclass (`TrainArgs` and its subclasses), read by several launch
paths (white-box; black-box sync; black-box async). An option that one path never reads is the
silent kind of failure: `--control permuted` on the async path once trained an ordinary GRPO run,
with no permutation and no F52 check, under a control's name. Two halves:

- `refuse(args, path, refused)`: at run time, a path refuses each option it cannot honour when the
  option is not at its default, naming why and what to run instead (`Refusal`).
- `unread(functions, args_cls, refused)`: statically, the options of `args_cls` that a path's
  functions never read (`args.NAME`, or a method of the args whose body reads `self.NAME`) and that
  its refusals do not name. `tests/train/test_options.py` holds every path to an empty answer.

    REFUSED = (Refusal("control", "AsyncGRPOTrainer scores rewards in its rollout worker", "--mode sync"),)
    refuse(args, "black-box async", REFUSED)   # ConfigError (F59) when --control is not 'none'
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dagent.errors import ConfigError

__all__ = ["OptionRefused", "Refusal", "refuse", "unread"]


class OptionRefused(ConfigError):
    """An option a launch path cannot honour was given (F59): refused instead of dropped."""


@dataclass(frozen=True)
class Refusal:
    """Option `name` (the dataclass field) is not honoured on a path: `why`, and `instead`."""

    name: str
    why: str
    instead: str


def refuse(args: Any, path: str, refused: Iterable[Refusal]) -> None:
    """Raise `OptionRefused` for the first refused option whose value is not its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(args)}
    for r in refused:
        value = getattr(args, r.name)
        if value != defaults[r.name]:
            flag = "--" + r.name.replace("_", "-")
            raise OptionRefused(
                f"F59: {flag} {value!r} is not honoured on the {path} path ({r.why}); it would be "
                f"dropped silently, so it is refused: {r.instead}"
            )


def _reads(fn: Callable[..., Any], name: str) -> tuple[set[str], set[str]]:
    """(attributes read from the parameter `name` in `fn`, of them the ones called as methods)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    attrs, calls = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name:
            attrs.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            calls.add(node.func.attr)
    return attrs, calls


def read_options(functions: Sequence[Callable[..., Any]], args_cls: type, *, param: str = "args") -> set[str]:
    """The fields of `args_cls` that `functions` read through their parameter `param`, following the
    args' own methods they call (`args.recipe()` reads what `recipe`'s body reads from `self`)."""
    fields = {f.name for f in dataclasses.fields(args_cls)}
    seen: set[str] = set()
    todo = [(fn, param) for fn in functions]
    done: set[str] = set()
    while todo:
        fn, name = todo.pop()
        attrs, calls = _reads(fn, name)
        seen |= attrs & fields
        for method in calls - done:
            done.add(method)
            if callable(getattr(args_cls, method, None)):
                todo.append((getattr(args_cls, method), "self"))
    return seen


def unread(
    functions: Sequence[Callable[..., Any]], args_cls: type, refused: Iterable[Refusal] = (), *, param: str = "args"
) -> list[str]:
    """The options of `args_cls` a launch path (its `functions`) neither reads nor refuses (F59)."""
    fields = [f.name for f in dataclasses.fields(args_cls)]
    handled = read_options(functions, args_cls, param=param) | {r.name for r in refused}
    return [f for f in fields if f not in handled]
