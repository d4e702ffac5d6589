"""Grading one value: does an agent's answer match the task's gold, as a careful human would decide?

A `Grade` is three-way: correct (reward 1.0), wrong (0.0) or ungraded (reward and correct None,
the note names the cause); `method` names the deciding rule. Pure: no network, no processes, no
global state (one bounded thread for math-verify). Rules, in order; gold is normalised alike:

1. `reject`: bytes that are not UTF-8; None, empty, or over 10,000 characters. Then stripped:
   whitespace, a BOM, a ``` fence, `**bold**`, matching quotes or backticks, a leading
   `Answer:` label, one trailing period; spaces collapse. Then rejected: a placeholder
   (`<value>`), a shell command (`echo 5 > /workdir/answer.txt`), a hedge (`3 or 4`, `3/4?`,
   `maybe`, `±`, lines with different values), each only when the gold lacks the marker.
2. `exact`: equal ignoring case. The only rule for string tasks.
3. number, `numeric`: sign (`+`, U+2212), currency, thousands separators (`1,234`, `1 234`),
   scientific notation (`1e6`, `1.5 x 10^6`), a fraction (`1/4`), a trailing `%` or unit words
   (`12 minutes`; `thousand`/`million`/`billion` scale). Equal when |a - g| <= atol + rtol*|g|
   (+ 1e-9 relative float slack). When one side alone carries `%`, its number p may equal the
   other or p/100 (`25%` == `0.25` == `25`); bare numbers never bridge (`15` != `0.15`).
4. number, `math_verify`, last resort, LaTeX only (`\\frac{1}{4}`, `\\boxed{42}`): math-verify
   parses; the value is computed here in floats (huge powers overflow, never hang) at the same
   tolerance. Its pitfalls are guarded: `1e6` becomes `1\\times 10^{6}` (it reads 1, or 6e
   inside `$`); `%` is bridged here (it equates `15%` and `15`); comma lists, several math
   spans and prose around them are wrong (it keeps the 3 of `1, 2, 3` and finds a `\\boxed{}`
   in any text); the math is always wrapped in `$` (it reads bare `2^{10}` as 2); only
   plain-number commands pass (`\\binom` runs for minutes); input is capped at 200 characters
   and 6 nesting levels (parse time grows with depth); it runs in a daemon thread bounded by
   `MATH_VERIFY_TIMEOUT_S` (its own timeouts use signal.alarm, which fails off the main thread).
5. list, `list`: brackets and quotes stripped, split on `;`/newlines (else commas), compared as
   multisets item by item, numerically or ignoring case; an extra or missing item is wrong.
   bool, `bool`: yes/no, true/false, y/n, t/f, 1/0.
6. record, `record`: several named values, each graded by these rules with its own type and
   tolerance, correct only when all are (dagent.grading.fields).
7. `ungraded`: an unknown answer type, or a gold empty or unparseable for its type (a task bug).

Invariant: `grade_value` never raises, whatever the agent wrote. The dispatch over answer types
(records included) and grading a whole task are `dagent.grading.dispatch`.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

MAX_ANSWER_CHARS = 10_000
MATH_VERIFY_TIMEOUT_S = 2.0
_MV_MAX_CHARS = 200
_MV_MAX_DEPTH = 6
_MV_COMMANDS = frozenset(
    "frac dfrac tfrac boxed times cdot sqrt pi text textbf textrm mathrm mathbf left right displaystyle".split()
)
VALUE_TYPES = ("number", "string", "list", "bool")  # one value each; records: dagent.grading.fields


@dataclass(frozen=True)
class Grade:
    """One grade: reward 1.0/0.0/None, correct True/False/None, the deciding rule and why."""

    reward: float | None
    correct: bool | None
    method: str
    note: str = ""

    @property
    def graded(self) -> bool:
        return self.correct is not None


right = partial(Grade, 1.0, True)  # right(method, note="")
wrong = partial(Grade, 0.0, False)  # wrong(method, note)
ungraded = partial(Grade, None, None, "ungraded")  # ungraded(note)


_FENCE = re.compile(r"```[\w+-]*\n(.*?)\n?```", re.S)
_PAIRS = (
    ("```", "```"),
    ("**", "**"),
    ("__", "__"),
    ('"', '"'),
    ("'", "'"),
    ("`", "`"),
    ("\u201c", "\u201d"),
    ("\u2018", "\u2019"),
)
_MAY_UNWRAP = re.compile(r"[`*_\"'\u201c\u2018]|the\s|final\s|answer\W", re.I)
_LABEL = re.compile(r"(?:the\s+)?(?:final\s+)?answer(?:\s+is\b|\s*[:=])\s*(?=\S)", re.I)


def _unwrap(text: str) -> str:
    """Strip fences, matching surrounding quotes, a leading label and a trailing period."""
    if not text.endswith(".") and not _MAY_UNWRAP.match(text):
        return text
    for _ in range(6):
        before = text
        if text[:1] in "`*_\"'\u201c\u2018":
            if text.startswith("```") and (m := _FENCE.fullmatch(text)):
                text = m.group(1).strip()
            for op, cl in _PAIRS:
                inner = text[len(op) : -len(cl)]
                if (
                    len(text) > len(op) + len(cl)
                    and text.startswith(op)
                    and text.endswith(cl)
                    and op not in inner
                    and cl not in inner
                ):
                    text = inner.strip()
        if m := _LABEL.match(text):
            text = text[m.end() :]
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1].rstrip()
        if text == before:
            break
    return text


def normalise(text: str) -> str:
    text = _unwrap(text.strip().lstrip("\ufeff").strip().replace("\u2212", "-"))
    if "\n" not in text and "\r" not in text:
        return " ".join(text.split())
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def decode(answer: str | bytes | None) -> tuple[str | None, str]:
    """The answer as text, or None and why it is wrong."""
    try:
        answer = bytes(answer).decode() if isinstance(answer, (bytes, bytearray)) else answer
    except UnicodeDecodeError as e:
        return None, f"answer is not valid UTF-8 (byte {e.start})"
    if answer is None:
        return None, "empty answer (none given)"
    text = str(answer).strip()
    if len(text) > MAX_ANSWER_CHARS:
        return None, f"answer too long ({len(text):,} characters > {MAX_ANSWER_CHARS:,})"
    return text, ""


_REJECTS = (
    (
        "placeholder",
        re.compile(
            r"<[^<>\n]{0,60}>|[\[{(]\s*(?:your[ _-]?)?(?:value|answer|result|number)\s*[\]})]"
            r"|(?:your[ _-]?)?(?:answer|value)(?:[ _]here)?|todo|tbd|placeholder|\.\.\.|\u2026|x{3,}",
            re.I,
        ),
        "fullmatch",
    ),
    (
        "shell command instead of a value",
        re.compile(
            r"^(?:\$\s*)?(?:echo|printf|cat|tee|python3?|bash|sh)\s|^print\s*\("
            r"|>>?\s*[\w./~-]{0,200}answer\.txt|/workdir/",
            re.I,
        ),
        "search",
    ),
    (
        "hedge with two candidate answers",
        re.compile(r"\b(?:or|maybe|perhaps|either|possibly)\b|\?|\u00b1|\+/-", re.I),
        "search",
    ),
)


def _rejection(answer: str, gold: str) -> str | None:
    """Why the answer is rejected before comparison, or None. Markers the gold shows don't count."""
    for name, pattern, how in _REJECTS:
        m = getattr(pattern, how)(answer)
        if m and not getattr(pattern, how)(gold):
            return f"{name}: {m.group(0)[:40]!r}"
    return None


_GROUPED = r"\d{1,3}(?:,\d{3})+|\d{1,3}(?:[ \u00a0\u2009\u202f]\d{3})+|\d+"
_NUM = rf"(?:(?:{_GROUPED})(?:\.\d*)?|\.\d+)"
_NUMBER = re.compile(
    rf"(?P<s1>[+-]?)\s*(?P<cur>[$\u20ac\u00a3\u00a5\u20b9]?)\s*(?P<s2>[+-]?)(?P<num>{_NUM})"
    r"(?:[eE](?P<e1>[+-]?\d{1,6})"
    r"|\s*[x\u00d7*\u00b7]\s*10\s*(?:\^|\*\*)\s*\{?(?P<e2>[+-]?\d{1,6})\}?)?"
    rf"(?:\s*/\s*(?P<den>{_NUM}))?\s*(?P<pct>%?)"
    r"(?:\s*(?P<unit>(?:[^\W\d_]|[\u00b0$\u20ac\u00a3\u00a5\u20b9])[^\d%]{0,40}))?"
)
_SCALE = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}
_NOT_UNIT = frozenset(
    "or and nor to not than but plus minus times between about around approximately roughly "
    "zero one two three four five six seven eight nine ten eleven twelve hundred".split()
)

_PLAIN = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,6})?")
_SEPARATORS = str.maketrans("", "", ", \u00a0\u2009\u202f")
_WORD = re.compile(r"[^\W\d_]+")
Num = tuple[float, bool]  # (value as written, written with a percent sign)


def parse_number(text: str) -> Num | None:
    """A plain written number as (value, percent), or None."""
    if _PLAIN.fullmatch(text):  # the common case, about ten times faster
        value = float(text)
        return (value, False) if math.isfinite(value) else None
    m = _NUMBER.fullmatch(text)
    if not m or (m["s1"] and m["s2"]):
        return None
    num = m["num"].translate(_SEPARATORS)
    exp = m["e1"] or m["e2"] or "0"
    try:
        value = float(f"{num}e{exp}")
        if m["den"]:
            value /= float(m["den"].translate(_SEPARATORS))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if (m["s1"] or m["s2"]) == "-":
        value = -value
    pct = bool(m["pct"])
    words = _WORD.findall(m["unit"].lower()) if m["unit"] else []
    if any(w in _NOT_UNIT for w in words):
        return None
    if words and words[0] in _SCALE:
        value *= _SCALE[words[0]]
    elif words[:1] in (["percent"], ["pct"]) or words[:2] == ["per", "cent"]:
        if pct:
            return None  # "5% percent"
        pct = True
    return (value, pct) if math.isfinite(value) else None


def _close(a: float, g: float, atol: float, rtol: float) -> bool:
    return abs(a - g) <= atol + rtol * abs(g) + 1e-9 * abs(g) + 1e-12


def _num_match(a: Num, g: Num, atol: float, rtol: float) -> bool:
    """Equal within tolerance; when one side alone has %, accept p or p/100 against the other."""
    (av, ap), (gv, gp) = a, g
    if ap == gp:
        return _close(av, gv, atol, rtol)
    candidates = (av, av / 100) if ap else (av, av * 100)
    return any(_close(c, gv, atol, rtol) for c in candidates)


_LATEX_HINT = re.compile(r"[\\${}^]")
_THOUSANDS_COMMA = re.compile(r"\{,\}|(?<=\d),(?=\d{3}(?!\d))")
_UNIT_TAIL = re.compile(r"(?<=[$}\])])\s*[^\W\d_]+(?:\s+[^\W\d_]+){0,2}$")
_MATH_SPAN = re.compile(r"\$\$(.*)\$\$|\$(.*)\$|\\\((.*)\\\)|\\\[(.*)\\\]", re.S)
_DELIMITER = re.compile(r"(?<!\\)\$|\\[()[\]]")
_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")


class _NotANumber(Exception):
    """math-verify's reading is not one finite number."""


def _to_float(expr: Any) -> float:
    """The value of a parsed sympy expression, computed in floats so nothing can hang."""
    import sympy

    if isinstance(expr, sympy.Symbol):
        parsed = parse_number(expr.name)
        if parsed is None or parsed[1]:
            raise _NotANumber(f"symbol {expr.name!r}")
        return parsed[0]
    if isinstance(expr, (sympy.Number, sympy.NumberSymbol)):
        return float(expr)
    for kind, op in ((sympy.Add, math.fsum), (sympy.Mul, math.prod), (sympy.Pow, lambda args: math.pow(*args))):
        if isinstance(expr, kind):
            return op([_to_float(arg) for arg in expr.args])
    raise _NotANumber(f"{type(expr).__name__} is not a plain number")


def _math_verify_value(latex: str) -> float:
    """Parse with math-verify (no signal timeouts) and evaluate; raises _NotANumber."""
    import sympy
    from math_verify import parse

    found = parse(latex, parsing_timeout=None)
    expr = found[0] if found else None
    if not isinstance(expr, sympy.Basic):
        raise _NotANumber("math-verify found no value")
    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs
    if isinstance(expr, sympy.FiniteSet):
        if len(expr) != 1:
            raise _NotANumber(f"several candidate values {expr}")
        expr = next(iter(expr))
    try:
        value = _to_float(expr)
    except (OverflowError, ValueError, ZeroDivisionError, TypeError, RecursionError) as e:
        raise _NotANumber(f"cannot evaluate ({type(e).__name__})") from e
    if not math.isfinite(value):
        raise _NotANumber("not a finite number")
    return value


def _bounded(fn: Any, arg: str, timeout_s: float) -> tuple[str, Any]:
    """Run fn(arg) in a daemon thread, waiting at most timeout_s: ('ok'|'error'|'timeout', x)."""
    box: list[tuple[str, Any]] = []

    def work() -> None:
        try:
            box.append(("ok", fn(arg)))
        except Exception as e:  # noqa: BLE001 - anything inside a foreign parser is data
            box.append(("error", e))

    worker = threading.Thread(target=work, name="dagent-math-verify", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return box[0] if box else ("timeout", None)


def grade_latex(text: str, gold: Num, atol: float, rtol: float, timeout_s: float = MATH_VERIFY_TIMEOUT_S) -> Grade:
    if len(text) > _MV_MAX_CHARS:
        return wrong("math_verify", f"LaTeX answer too long ({len(text)} > {_MV_MAX_CHARS})")
    depth = deepest = 0
    for ch in text:
        depth += (ch in "{([") - (ch in "})]")
        deepest = max(deepest, depth)
    if deepest > _MV_MAX_DEPTH:
        return wrong("math_verify", f"LaTeX nested too deep ({deepest} > {_MV_MAX_DEPTH})")
    unknown = sorted(set(re.findall(r"\\([A-Za-z]+)", text)) - _MV_COMMANDS)
    if unknown or "!" in text:
        return wrong("math_verify", f"LaTeX beyond a plain number: {(unknown or ['!'])[0]}")
    percents = re.findall(r"\\?%", text)
    if len(percents) > 1:
        return wrong("math_verify", "several percent signs")
    latex = re.sub(r"\\?%", "", text)
    if tail := _UNIT_TAIL.search(latex):  # a unit word after the math, as in `$5$ kg`
        if set(tail[0].lower().split()) & _NOT_UNIT:
            return wrong("math_verify", f"not a unit after the LaTeX: {tail[0].strip()!r}")
        latex = latex[: tail.start()]
    if span := _MATH_SPAN.fullmatch(latex):
        latex = next(group for group in span.groups() if group is not None)
    if _DELIMITER.search(latex) or latex.find("\\boxed") > 0:
        return wrong("math_verify", "prose or several values around the LaTeX")
    latex = _E_NOTATION.sub(r"\1\\times 10^{\2}", latex)
    if re.search(r"[,;]", _THOUSANDS_COMMA.sub("", latex)):
        return wrong("math_verify", "several values (a comma list is not one number)")
    latex = f"${latex}$"
    try:
        import math_verify  # noqa: F401 - imported here so the thread only parses
    except ImportError:  # a server setup bug, not the agent's fault
        return ungraded("math-verify is not installed: pip install math-verify==0.9.0")
    status, result = _bounded(_math_verify_value, latex, timeout_s)
    if status == "timeout":
        return wrong("math_verify", f"math-verify timed out after {timeout_s:g} s")
    if status == "error":
        return wrong("math_verify", f"not a number: {str(result)[:80]}")
    if _num_match((result, bool(percents)), gold, atol, rtol):
        return right("math_verify", f"LaTeX value {result:.10g}")
    return wrong("math_verify", f"LaTeX value {result:.10g} is outside tolerance")


_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_BULLET_STARTS = frozenset("-*\u20220123456789")
_ITEM_SEP = re.compile(r"[;\n]")
_BOOLS = {**dict.fromkeys(("true", "yes", "y", "t", "1"), True), **dict.fromkeys(("false", "no", "n", "f", "0"), False)}


def _split_list(text: str) -> list[str]:
    text = text.strip()
    while len(text) >= 2 and text[0] + text[-1] in ("[]", "()", "{}"):
        text = text[1:-1].strip()
    parts = _ITEM_SEP.split(text) if ";" in text or "\n" in text else text.split(",")
    return [item for item in map(_clean_item, parts) if item]


def _clean_item(item: str) -> str:
    item = item.strip()
    item = _BULLET.sub("", item) if item[:1] in _BULLET_STARTS else item
    return _unwrap(item.rstrip(",").strip())


def _sorted_items(text: str) -> list[tuple[Num | None, str]]:
    """(number or None, casefolded text) per item, numbers first in order: matching is ~linear."""
    items = [(parse_number(item), item.casefold()) for item in _split_list(text)]
    return sorted(items, key=lambda it: (0, it[0][0], "") if it[0] else (1, 0.0, it[1]))


def _list_mismatch(answer: str, gold_items: list[tuple[Num | None, str]], atol: float, rtol: float) -> str | None:
    """None when the lists hold the same items in any order, else what differs."""
    left = _sorted_items(answer)
    if len(left) != len(gold_items):
        return f"{len(left)} items, expected {len(gold_items)} (an extra or missing item)"
    for index, (want_num, want) in enumerate(gold_items, start=1):
        for i, (have_num, have) in enumerate(left):
            if have == want or (have_num and want_num and _num_match(have_num, want_num, atol, rtol)):
                del left[i]
                break
        else:
            return f"no answer item matches gold item #{index}"
    return None


def grade_value(answer: str | bytes | None, gold: str, answer_type: str, atol: float = 0.0, rtol: float = 0.0) -> Grade:
    """Grade one single-value answer (number, string, list, bool) against its gold; never raises."""
    if answer_type not in VALUE_TYPES:
        return ungraded(f"unknown answer_type {answer_type!r} (expected one of {VALUE_TYPES})")
    gold_text = normalise(str(gold))
    if not gold_text:
        return ungraded("gold is empty")
    gold_num = parse_number(gold_text) if answer_type == "number" else None
    if answer_type == "number" and gold_num is None:
        return ungraded(f"gold {gold_text[:40]!r} is not a number")
    if answer_type == "bool" and _BOOLS.get(gold_text.casefold()) is None:
        return ungraded(f"gold {gold_text[:40]!r} is not a boolean")
    gold_items = _sorted_items(gold_text) if answer_type == "list" else []
    if answer_type == "list" and not gold_items:
        return ungraded("gold list has no items")

    raw, why = decode(answer)
    if raw is None:
        return wrong("reject", why)
    text = normalise(raw)
    if not text:
        return wrong("reject", "empty answer")
    if rejection := _rejection(text, gold_text):
        return wrong("reject", rejection)
    if answer_type != "list" and "\n" in text and "\n" not in gold_text:
        lines = text.split("\n")
        values = {parse_number(line) for line in lines} if answer_type == "number" else {None}
        if len({line.casefold() for line in lines}) > 1 and (None in values or len(values) > 1):
            return wrong("reject", "hedge: several lines with different values")
        text = lines[0]
    if text.casefold() == gold_text.casefold():
        return right("exact")

    if answer_type == "string":
        return wrong("exact", "text differs from gold (compared ignoring case and spacing)")
    if answer_type == "bool":
        value = _BOOLS.get(text.casefold())
        if value is None or value != _BOOLS[gold_text.casefold()]:
            return wrong("bool", "not a yes/no value" if value is None else "opposite truth value")
        return right("bool")
    if answer_type == "list":
        mismatch = _list_mismatch(text, gold_items, atol, rtol)
        return wrong("list", mismatch) if mismatch else right("list")
    assert gold_num is not None
    parsed = parse_number(text)
    if parsed is not None:
        if _num_match(parsed, gold_num, atol, rtol):
            return right("numeric")
        return wrong(
            "numeric", f"{parsed[0]:.10g}{'%' if parsed[1] else ''} is outside tolerance (atol={atol:g}, rtol={rtol:g})"
        )
    if _LATEX_HINT.search(text):
        return grade_latex(text, gold_num, atol, rtol)
    return wrong("numeric", "answer is not a number")
