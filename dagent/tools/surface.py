"""The white-box tool surface: one registry, over ONE sandbox per episode.

Toolsets compose the surface: `bash` (`bash`), `seta` (SETA's file tools under SETA's names:
`read`, `write`, `edit`, `grep`, `glob`, `ls`), default both. The terminator `submit_solution` is
always present, whatever the selection, so a bash-only agent can still finish.

Invariants (tests/tools/test_surface.py, tests/envs/test_faces.py):
- The signatures below (`Signatures`) are the ONLY description of the surface. The TRL class's
  methods, the MCP server's tools and the HTTP client's methods are all generated from them with
  `tool_function` / `select`, so the schema offered to the model and the tools served are the same
  set by construction (F25).
- A tool never raises (implementations: `dagent.tools.impl`): an unknown tool, a missing, extra or
  mistyped argument, a path outside /workdir, a missing file, an `old` text that is absent, a
  non-zero exit all come back as `ToolResult(ok=False, output=<what went wrong, what to do>)`.
  Only a sandbox that cannot be used at all raises `SandboxError`; the episode makes it data.
- Output is clipped to `ToolSettings.output_chars` (default 1,200) with a visible marker that says
  how many characters were cut.
- File tools are confined to /workdir: paths are resolved against it and anything that leaves it
  is refused before the sandbox is touched; the sandbox backend refuses symlink escapes.
- `submit_solution` accepts `str | int | float` and coerces once (F27): a model that emits a bare
  `3` must not be told its answer is the wrong type.
"""

from __future__ import annotations

import inspect
import math
import posixpath
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from dagent.core.task import WORKDIR
from dagent.errors import ConfigError, ToolRefused

TERMINATOR = "submit_solution"
TOOLSETS: dict[str, tuple[str, ...]] = {
    "bash": ("bash",),
    "seta": ("read", "write", "edit", "grep", "glob", "ls"),
}
DEFAULT_TOOLSETS: tuple[str, ...] = ("bash", "seta")
OUTPUT_CHARS = 1200
READ_LIMIT = 2000


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced. `cause` is set only when the SANDBOX failed (not the agent)."""

    ok: bool
    output: str
    cause: str | None = None

    def render(self) -> str:
        """The text the model sees."""
        return self.output if self.ok else f"Error: {self.output}"


class WireResult(TypedDict):
    """A ToolResult on the wire (the served MCP tools return this object)."""

    ok: bool
    output: str


@dataclass(frozen=True)
class ToolSettings:
    output_chars: int = OUTPUT_CHARS
    command_timeout_s: float = 60.0
    read_limit: int = READ_LIMIT


class Signatures:
    """The model-facing signature and description of every tool (signatures only: the bodies are never run)."""

    @staticmethod
    def bash(command: str) -> str:
        """Run a bash command in the sandbox, in /workdir, and return its output (stdout, then stderr).

        Args:
            command: The bash command line to run, e.g. "wc -l input/*.csv" or "python3 analysis.py".
        """
        raise NotImplementedError

    @staticmethod
    def read(path: str, offset: int | None = None, limit: int | None = None) -> str:
        """Read a text file under /workdir; each line is prefixed with its line number.

        Args:
            path: File path, absolute or relative to /workdir.
            offset: Line number to start from (1-based); default the first line.
            limit: Maximum number of lines to return; default 2000.
        """
        raise NotImplementedError

    @staticmethod
    def write(path: str, content: str) -> str:
        """Create or overwrite a text file under /workdir (the files in /workdir/input are read-only).

        Args:
            path: File path, absolute or relative to /workdir.
            content: The complete text to write.
        """
        raise NotImplementedError

    @staticmethod
    def edit(path: str, old: str, new: str, replace_all: bool = False) -> str:
        """Replace exact text in a file under /workdir.

        Args:
            path: File path, absolute or relative to /workdir.
            old: The exact text to replace; it must occur exactly once unless replace_all is true.
            new: The replacement text.
            replace_all: Replace every occurrence of old instead of exactly one.
        """
        raise NotImplementedError

    @staticmethod
    def grep(pattern: str, path: str | None = None, glob: str | None = None) -> str:
        """Search file contents under /workdir with a regular expression; prints path:line:text per match.

        Args:
            pattern: A Python regular expression.
            path: File or directory to search; default /workdir.
            glob: Only search files whose name matches this glob, e.g. "*.csv".
        """
        raise NotImplementedError

    @staticmethod
    def glob(pattern: str, path: str | None = None) -> str:
        """List files under /workdir whose path matches a glob pattern ("**" matches any depth).

        Args:
            pattern: Glob pattern relative to path, e.g. "**/*.csv".
            path: Directory to search from; default /workdir.
        """
        raise NotImplementedError

    @staticmethod
    def ls(path: str | None = None) -> str:
        """List a directory under /workdir: one entry per line with its size; directories end in "/".

        Args:
            path: Directory to list; default /workdir.
        """
        raise NotImplementedError

    @staticmethod
    def submit_solution(answer: str | int | float) -> str:
        """Submit your final answer and end the episode. Call it once, with only the value asked for.

        Args:
            answer: The answer itself: a number, a name, yes/no, or a comma-separated list, as the question asks.
        """
        raise NotImplementedError


ALL_TOOLS: tuple[str, ...] = (*TOOLSETS["bash"], *TOOLSETS["seta"], TERMINATOR)


def select(selection: str | Iterable[str] | None = None) -> tuple[str, ...]:
    """Tool names for a toolset selection (`None`, "all", "bash", "seta", "bash,seta", a tuple).

    The terminator is always included. Unknown toolsets fail naming the valid ones.
    """
    if selection is None or selection in ("", "all", "default"):
        sets: Iterable[str] = DEFAULT_TOOLSETS
    elif isinstance(selection, str):
        sets = [s.strip() for s in selection.split(",") if s.strip()]
    else:
        sets = list(selection)
    sets = list(sets)
    unknown = [s for s in sets if s not in TOOLSETS]
    if unknown or not sets:
        raise ConfigError(
            f"unknown tool selection {selection!r}: choose toolsets from {sorted(TOOLSETS)} "
            "(comma-separated, e.g. 'bash,seta'), or leave it unset for both"
        )
    names = {name for s in sets for name in TOOLSETS[s]}
    return tuple(n for n in ALL_TOOLS if n in names or n == TERMINATOR)


def signature(name: str) -> inspect.Signature:
    return inspect.signature(getattr(Signatures, name))


@lru_cache(maxsize=None)
def _hints(name: str) -> dict[str, Any]:
    return typing.get_type_hints(getattr(Signatures, name))


@lru_cache(maxsize=None)
def _adapter(name: str, param: str) -> TypeAdapter:
    return TypeAdapter(_hints(name)[param])


def usage(name: str) -> str:
    """`read(path, offset?, limit?)`: how a tool is called, for error messages."""
    parts = [
        p.name + ("?" if p.default is not inspect.Parameter.empty else "") for p in signature(name).parameters.values()
    ]
    return f"{name}({', '.join(parts)})"


def coerce_answer(answer: Any) -> str | None:
    """The one coercion of a submitted answer to text, or None when it is not a scalar (F27)."""
    if isinstance(answer, bool):
        return "true" if answer else "false"
    if isinstance(answer, int):
        return str(answer)
    if isinstance(answer, float):
        return repr(answer) if math.isfinite(answer) else str(answer)
    if isinstance(answer, str):
        return answer
    return None


def validate(name: str, arguments: Any, served: Iterable[str] = ALL_TOOLS) -> dict[str, Any] | ToolResult:
    """Checked, typed arguments for `name`, or a ToolResult saying what is wrong with the call."""
    served = tuple(served)
    if name not in served:
        return ToolResult(False, f"unknown tool {name!r}; the tools are: {', '.join(served)}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return ToolResult(False, f"arguments must be a JSON object; call it as {usage(name)}")
    params = signature(name).parameters
    extra = sorted(set(arguments) - set(params))
    if extra:
        return ToolResult(False, f"unexpected argument(s) {', '.join(map(repr, extra))}; call it as {usage(name)}")
    out: dict[str, Any] = {}
    for pname, p in params.items():
        if pname not in arguments:
            if p.default is inspect.Parameter.empty:
                return ToolResult(False, f"missing required argument {pname!r}; call it as {usage(name)}")
            out[pname] = p.default
            continue
        value = arguments[pname]
        if name == TERMINATOR:
            text = coerce_answer(value)
            if text is None:
                return ToolResult(
                    False,
                    "answer must be a single value (a string or a number); give a list as one comma-separated string",
                )
            out[pname] = text
            continue
        try:
            out[pname] = _adapter(name, pname).validate_python(value)
        except ValidationError as e:
            err = e.errors()[0]["msg"] if e.errors() else str(e)
            return ToolResult(
                False, f"argument {pname!r} of {name}: {err} (got {value!r:.80}); call it as {usage(name)}"
            )
    return out


# ------------------------------------------------------------------ clipping and paths


def clip(text: str, limit: int = OUTPUT_CHARS) -> str:
    """Keep at most `limit` characters (head and tail) with a marker saying how many were cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    cut = len(text) - limit
    head = (limit * 2) // 3
    tail = limit - head
    return (
        f"{text[:head]}\n[... {cut:,} characters cut: output is limited to {limit:,} characters; "
        f"narrow the command or read a smaller range ...]\n{text[len(text) - tail :]}"
    )


class Refused(ToolRefused):
    """A call the tool turns down for what it asks (a path outside /workdir, a read-only input)."""


def confine(path: str | None) -> str:
    """The absolute, normalised path under /workdir that `path` names; `Refused` when outside."""
    if path is None or path == "":
        return WORKDIR
    joined = posixpath.normpath(posixpath.join(WORKDIR, path))
    if joined != WORKDIR and not joined.startswith(WORKDIR + "/"):
        raise Refused(f"{path!r} is outside {WORKDIR}: the tools only reach files under {WORKDIR}")
    return joined


# ------------------------------------------------------------------ generated faces


def tool_function(
    name: str,
    call: Callable[..., Any],
    *,
    receiver: bool = False,
    routing: str | None = None,
    routing_optional: bool = False,
) -> Callable[..., Any]:
    """A function with tool `name`'s exact signature and docstring that forwards to `call`.

    `receiver=True` makes a method (`call(self, name, kwargs)`); `routing` adds a leading
    keyword parameter (the wire's `episode_id`) passed as `call(name, kwargs, routing_value)`, and
    declares the `WireResult` object `call` must return (what the MCP server validates against);
    `routing_optional=True` makes it a trailing `str | None = None` (an MCP session carries it).
    Calls are not checked here: the arguments reach `validate`, so a bad call is a ToolResult.
    """
    sig = signature(name)
    params = list(sig.parameters.values())
    hints = dict(_hints(name))
    if routing and routing_optional:
        params.append(inspect.Parameter(routing, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None))
        hints = {**hints, routing: str | None, "return": WireResult}
        sig = sig.replace(return_annotation=WireResult)
    elif routing:
        params.insert(0, inspect.Parameter(routing, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str))
        hints = {routing: str, **hints, "return": WireResult}
        sig = sig.replace(return_annotation=WireResult)
    if receiver:
        params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    names = [p.name for p in params if p.name != "self" and p.kind != inspect.Parameter.KEYWORD_ONLY]

    def bind(args: tuple, kwargs: dict) -> dict | None:
        if len(args) > len(names) or any(n in kwargs for n in names[: len(args)]):
            return None
        return {**dict(zip(names, args, strict=False)), **kwargs}

    fn: Callable[..., Any]
    if receiver:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            bound = bind(args, kwargs)
            return call(self, name, bound if bound is not None else _BAD_POSITIONAL)

        fn = method
    elif routing:

        def routed(*args: Any, **kwargs: Any) -> Any:
            bound = bind(args, kwargs)
            if bound is None:
                return call(name, _BAD_POSITIONAL, None)
            return call(name, bound, bound.pop(routing, None))

        fn = routed
    else:

        def plain(*args: Any, **kwargs: Any) -> Any:
            bound = bind(args, kwargs)
            return call(name, bound if bound is not None else _BAD_POSITIONAL)

        fn = plain

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = getattr(Signatures, name).__doc__
    fn.__annotations__ = hints
    setattr(fn, "__signature__", sig.replace(parameters=params))  # what inspect.signature reports
    return fn


_BAD_POSITIONAL = "<too many or repeated positional arguments>"  # fails validate: not a mapping
