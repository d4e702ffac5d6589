"""Which held-out tasks each published result opened, and what a new result reuses (F60; pure).

A held-out result is "opened once" only if no earlier result looked at its tasks: an earlier run
that read the same `eval` tasks (and the choices made after it: more steps, more tasks, another
recipe) makes the new figure a second look. The ledger (`docs/runs/opened.json`, appended by
hand or by `Ledger.add`, in the order the results were opened) lists every result's split and
task ids. A report states, for its result, how many of its tasks earlier results had opened and
which (`Ledger.disclosure`); a run that promises fresh tasks refuses reuse before it evaluates
(`Ledger.require_fresh`, `python -m dagent.eval.opened check`).

    ledger = Ledger.read("docs/runs/opened.json")
    ledger.disclosure("lr-whitebox", ids)    # "opened 128 eval:easy tasks; 24 of them were opened before by ..."
    ledger.require_fresh("eval:medium", ids)  # ReuseError (F60) naming the earlier results
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dagent.errors import ConfigError

__all__ = ["Ledger", "Opening", "ReuseError"]


class ReuseError(ConfigError):
    """A result promised on tasks no earlier result opened would reuse some (F60)."""


class Opening(BaseModel):
    """One result and the held-out tasks it opened."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    result: str = Field(description="A name for the result (the run and its arms).")
    split: str = Field(description="The split (and tier) its tasks came from, e.g. eval:easy.")
    task_ids: tuple[str, ...] = Field(description="Every task it opened.")
    how: str = Field(default="", description="How the tasks were chosen (limit, task seed) and where it is reported.")


class Ledger(BaseModel):
    """Every opening, in the order the results were opened."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    openings: tuple[Opening, ...] = ()

    @classmethod
    def read(cls, path: Path | str) -> Ledger:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"no ledger of opened tasks at {path}: without it reuse cannot be ruled out; "
                "write one (dagent.eval.opened.Ledger.add) listing every earlier held-out result"
            )
        return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))

    def write(self, path: Path | str) -> Path:
        path = Path(path)
        path.write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")
        return path

    def add(self, opening: Opening) -> Ledger:
        if any(o.result == opening.result for o in self.openings):
            raise ConfigError(f"the ledger already has a result named {opening.result!r}: name each result once")
        return Ledger(openings=(*self.openings, opening))

    def before(self, result: str | None) -> tuple[Opening, ...]:
        """The openings earlier than `result` (all of them when it is None or not listed)."""
        names = [o.result for o in self.openings]
        return self.openings[: names.index(result)] if result in names else self.openings

    def reused(self, task_ids: Iterable[str], *, result: str | None = None) -> dict[str, list[str]]:
        """Of `task_ids`, the ones each earlier result opened (only results that opened any)."""
        ids = list(dict.fromkeys(task_ids))
        out = {}
        for o in self.before(result):
            seen = set(o.task_ids)
            if hits := [t for t in ids if t in seen]:
                out[o.result] = hits
        return out

    def fresh(self, task_ids: Iterable[str], *, result: str | None = None) -> list[str]:
        """Of `task_ids`, the ones no earlier result opened."""
        reused = {t for hits in self.reused(task_ids, result=result).values() for t in hits}
        return [t for t in dict.fromkeys(task_ids) if t not in reused]

    def disclosure(self, result: str, split: str, task_ids: Sequence[str]) -> str:
        """The sentence a report states about which tasks its result opened (F60)."""
        ids = list(dict.fromkeys(task_ids))
        reused = self.reused(ids, result=result)
        if not reused:
            return f"{result} opened {len(ids)} {split} tasks that no earlier result had opened."
        earlier = "; ".join(f"{len(h)} by {name}" for name, h in reused.items())
        fresh = len(self.fresh(ids, result=result))
        return (
            f"{result} opened {len(ids)} {split} tasks; {len(ids) - fresh} of them had been opened before "
            f"({earlier}), so on those this is a second look; {fresh} were opened here first."
        )

    def require_fresh(self, split: str, task_ids: Sequence[str], *, result: str | None = None) -> None:
        """Refuse (ReuseError, F60) when any of `task_ids` was opened by an earlier result."""
        if reused := self.reused(task_ids, result=result):
            which = "; ".join(f"{name}: {len(h)} (e.g. {h[0]})" for name, h in reused.items())
            raise ReuseError(
                f"F60: {sum(map(len, reused.values()))} of these {len(task_ids)} {split} tasks were "
                f"opened by earlier results ({which}): a claim 'opened once' on them would be a second "
                "look; choose tasks no result opened (another split, tier or task seed) or state the reuse"
            )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Refuse (F60) held-out tasks an earlier result opened.")
    ap.add_argument("command", choices=["check"])
    ap.add_argument("records", type=Path, help="A records.jsonl (or a file of task ids, one a line) to check")
    ap.add_argument("--ledger", type=Path, default=Path("docs/runs/opened.json"))
    ap.add_argument("--split", required=True)
    args = ap.parse_args(argv)
    ids = []
    for line in args.records.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            ids.append(json.loads(line)["task_id"] if line.startswith("{") else line)
    Ledger.read(args.ledger).require_fresh(args.split, ids)
    print(f"{len(set(ids))} {args.split} tasks, none opened by an earlier result in {args.ledger}")


if __name__ == "__main__":
    main()
