"""Command-line arguments from a dataclass: the jobs under jobs/ and the `dagent` subcommands that
run the same job share one definition (field defaults, types and `metadata["help"]`).

What `transformers.HfArgumentParser` does, kept here for one measured reason: the `dagent` command
parses these before it knows whether it will train, and importing HfArgumentParser loads 537 modules
of transformers (this module: 22), which every `dagent eval`, `dagent suite` and `dagent --help` would
then pay for (the whole CLI without it: 838). The dataclasses are HfArgumentParser's shape (fields with
`metadata["help"]`), so a job may parse them with it too."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _kind(annotation: Any) -> tuple[Any, bool]:
    """(element type, is a list) of a field's annotation, `X | None` unwrapped."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing), {})  # noqa: S307 - our own dataclass annotations
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _kind(args[0])
    if origin in (list, tuple):
        return (args[0] if args else str), True
    return annotation, False


def parser_for(cls: type, description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(cls):
        kind, many = _kind(f.type)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        name = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(
                name, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        else:
            parser.add_argument(
                name,
                dest=f.name,
                type=kind,
                default=default,
                nargs="+" if many else None,
                help=f"{help_text} (default: {default})",
            )
    return parser


def parse(cls: type[T], argv: Sequence[str] | None = None, description: str | None = None) -> T:
    return cls(**vars(parser_for(cls, description).parse_args(argv)))
