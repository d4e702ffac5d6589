"""The verifier of an exported Harbor task: grades /workdir/answer.txt against /tests/gold.json.

Exported as `tests/grader.py`, next to a byte-for-byte copy of dagent's grading modules in
`tests/lib/dagent/`, so a Harbor verifier and `dagent.grading` are one grader (tests prove it
case by case). Writes to the verifier log directory:
- `grade.json`: correct (true / false / null), the deciding rule, its note, whether an answer
  file was there;
- `reward.json` (what Harbor reads): `reward` (correctness: 1.0 or 0.0) and `correct`, plus
  `answer_present`. The efficiency bonus of `dagent.core.reward` needs the episode's tool calls,
  which a verifier cannot see: a trainer adds it from the captured trajectory.

A missing or empty answer file is graded wrong (reward 0.0). A grade that cannot be made (the
gold file unreadable, a gold the grader cannot parse: a task bug) writes NO reward file and
exits 2, so Harbor records an error and never a 0.0 that reads like a wrong answer (F32).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if (_HERE / "lib" / "dagent").is_dir():  # the exported task's copy of dagent's grader
    sys.path.insert(0, str(_HERE / "lib"))

from dagent.core.reward import RewardConfig, reward  # noqa: E402
from dagent.grading.dispatch import grade_answer  # noqa: E402

ANSWER = "/workdir/answer.txt"
LOGS = "/logs/verifier"
UNGRADED_EXIT = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answer", default=ANSWER, help="the agent's answer file")
    parser.add_argument("--gold", default=str(_HERE / "gold.json"), help="the task's gold record")
    parser.add_argument("--out", default=LOGS, help="where reward.json and grade.json go")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(Path(args.gold).read_text(encoding="utf-8"))
        gold, answer_type = spec["gold"], spec["answer_type"]
        atol, rtol = float(spec["atol"]), float(spec["rtol"])
        fields = {k: (float(a), float(r)) for k, (a, r) in spec.get("field_tolerances", {}).items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"dagent-grader: cannot read the gold record {args.gold} ({e}); re-export the "
            "task with `dagent export harbor`",
            file=sys.stderr,
        )
        return UNGRADED_EXIT
    path = Path(args.answer)
    answer = path.read_bytes() if path.is_file() else None
    grade = grade_answer(answer, gold, answer_type, atol, rtol, fields)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "correct": grade.correct,
        "method": grade.method,
        "note": grade.note,
        "answer_present": answer is not None,
    }
    (out / "grade.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if grade.correct is None:
        print(f"dagent-grader: ungraded ({grade.note}); no reward written (F32)", file=sys.stderr)
        return UNGRADED_EXIT
    value = reward(grade.correct, 0, RewardConfig(mode="correctness"))
    rewards = {"reward": value, "correct": float(grade.correct), "answer_present": float(answer is not None)}
    (out / "reward.json").write_text(json.dumps(rewards) + "\n", encoding="utf-8")
    print(f"dagent-grader: {'correct' if grade.correct else 'wrong'} ({grade.method}) {grade.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
