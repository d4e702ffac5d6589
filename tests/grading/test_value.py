"""Grading decides as a careful human would: one table of (answer, gold, type, tolerance) cases."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagent.core.task import Task
from dagent.errors import GraderError
from dagent.grading.dispatch import grade, grade_answer
from dagent.grading.value import Grade, grade_latex

N, S, L, B = "number", "string", "list", "bool"
R = "reject"

# (answer, gold, answer_type, atol, rtol, expected_correct, expected_method or None)
CASES = [
    # --- normalisation: encoding, emptiness, size, wrappers
    ("", "1", N, 0, 0, False, R),
    ("   \n\t ", "1", N, 0, 0, False, R),
    (None, "1", N, 0, 0, False, R),
    (b"\xff\xfe", "1", N, 0, 0, False, R),
    (b"\xc3\x28", "a", S, 0, 0, False, R),
    (b"42", "42", N, 0, 0, True, "exact"),
    ("\ufeff42", "42", N, 0, 0, True, "exact"),
    (" 42 \n", "42", N, 0, 0, True, "exact"),
    ('"42"', "42", N, 0, 0, True, "exact"),
    ("'42'", "42", N, 0, 0, True, "exact"),
    ("`42`", "42", N, 0, 0, True, "exact"),
    ("```\n42\n```", "42", N, 0, 0, True, "exact"),
    ("```text\n42\n```", "42", N, 0, 0, True, "exact"),
    ("**42**", "42", N, 0, 0, True, "exact"),
    ("Answer: 42", "42", N, 0, 0, True, "exact"),
    ("The final answer is 42", "42", N, 0, 0, True, "exact"),
    ("42.", "42", N, 0, 0, True, "exact"),
    ("1" * 10_001, "1", N, 0, 0, False, R),
    ("x" * 10_000, "x" * 10_000, S, 0, 0, True, "exact"),
    # --- placeholders
    ("<value>", "1", N, 0, 0, False, R),
    ("<your answer here>", "Paris", S, 0, 0, False, R),
    ("[answer]", "a, b", L, 0, 0, False, R),
    ("{value}", "1", N, 0, 0, False, R),
    ("YOUR_ANSWER", "1", N, 0, 0, False, R),
    ("...", "1", N, 0, 0, False, R),
    ("TODO", "yes", B, 0, 0, False, R),
    ("<NA>", "<NA>", S, 0, 0, True, "exact"),  # the gold itself shows the marker
    # --- a shell command instead of a value
    ('echo -n "5" > /workdir/answer.txt', "5", N, 0, 0, False, R),
    ("echo 5", "5", N, 0, 0, False, R),
    ("printf '5'", "5", N, 0, 0, False, R),
    ("5 > /workdir/answer.txt", "5", N, 0, 0, False, R),
    ("cat /workdir/answer.txt", "5", N, 0, 0, False, R),
    ("print(5)", "5", N, 0, 0, False, R),
    ("python3 -c 'print(5)'", "5", N, 0, 0, False, R),
    ("Cat Stevens", "cat stevens", S, 0, 0, True, "exact"),
    # --- hedges
    ("3 or 4", "3", N, 0, 0, False, R),
    ("3 OR 4", "4", N, 0, 0, False, R),
    ("3/4?", "0.75", N, 0, 0, False, R),
    ("42?", "42", N, 0, 0, False, R),
    ("maybe 42", "42", N, 0, 0, False, R),
    ("42 ± 1", "42", N, 0, 0, False, R),
    ("42 +/- 1", "42", N, 0, 0, False, R),
    ("3\n4", "3", N, 0, 0, False, R),
    ("Paris\nLyon", "Paris", S, 0, 0, False, R),
    ("yes or no", "yes", B, 0, 0, False, R),
    ("yes\nno", "yes", B, 0, 0, False, R),
    ("3\n3", "3", N, 0, 0, True, "exact"),
    ("42.0\n\n42", "42", N, 0, 0, True, "numeric"),  # one value spelt twice is no hedge
    ("42\n43", "42", N, 0, 0, False, R),
    ("42\nabout 42", "42", N, 0, 0, False, R),
    ("Trick or Treat", "trick or treat", S, 0, 0, True, "exact"),
    (r"$\frac{1}{4}$ or $\frac{1}{2}$", "0.25", N, 0, 0, False, R),
    # --- exact / strings
    ("Paris", "Paris", S, 0, 0, True, "exact"),
    ("paris", "Paris", S, 0, 0, True, "exact"),
    ("PARIS.", "Paris", S, 0, 0, True, "exact"),
    ('"Paris"', "Paris", S, 0, 0, True, "exact"),
    ("New   York", "new york", S, 0, 0, True, "exact"),
    ("  united airlines inc ", "United Air Lines Inc", S, 0, 0, False, "exact"),
    ("Lyon", "Paris", S, 0, 0, False, "exact"),
    ("U.S.", "U.S.", S, 0, 0, True, "exact"),
    ("007", "7", S, 0, 0, False, "exact"),  # strings never compare as numbers
    ("Paris, France", "Paris", S, 0, 0, False, "exact"),
    # --- numeric: separators, signs, notation, units, currency, zeros
    ("1,234", "1234", N, 0, 0, True, "numeric"),
    ("1,234,567.5", "1234567.5", N, 0, 0, True, "numeric"),
    ("1 234", "1234", N, 0, 0, True, "numeric"),
    ("1\u202f234\u202f567", "1234567", N, 0, 0, True, "numeric"),
    ("1,23", "123", N, 0, 0, False, "numeric"),
    ("12,34", "1234", N, 0, 0, False, "numeric"),
    ("+5", "5", N, 0, 0, True, "numeric"),
    ("\u22125", "-5", N, 0, 0, True, "exact"),  # U+2212 normalises to "-"
    ("\u22122.5", "-2.50", N, 0, 0, True, "numeric"),
    ("-5", "5", N, 0, 0, False, "numeric"),
    ("5", "-5", N, 0, 0, False, "numeric"),
    ("+-5", "-5", N, 0, 0, False, "numeric"),
    ("1e6", "1000000", N, 0, 0, True, "numeric"),
    ("1e6", "1", N, 0, 0, False, "numeric"),
    ("1E6", "1e6", N, 0, 0, True, "exact"),
    ("1.5E-3", "0.0015", N, 0, 0, True, "numeric"),
    ("1.5e+03", "1500", N, 0, 0, True, "numeric"),
    ("1.5 x 10^6", "1500000", N, 0, 0, True, "numeric"),
    ("1.5 × 10^6", "1500000", N, 0, 0, True, "numeric"),
    ("2.5*10**3", "2500", N, 0, 0, True, "numeric"),
    ("1e999", "1", N, 0, 0, False, "numeric"),
    ("$1,234.50", "1234.5", N, 0, 0, True, "numeric"),
    ("-$5", "-5", N, 0, 0, True, "numeric"),
    ("$-5", "-5", N, 0, 0, True, "numeric"),
    ("€12", "12", N, 0, 0, True, "numeric"),
    ("12 minutes", "12", N, 0, 0, True, "numeric"),
    ("45 kg", "45", N, 0, 0, True, "numeric"),
    ("45kg", "45", N, 0, 0, True, "numeric"),
    ("20 °C", "20", N, 0, 0, True, "numeric"),
    ("3.5 km/h", "3.5", N, 0, 0, True, "numeric"),
    ("1234.50 USD", "1234.5", N, 0, 0, True, "numeric"),
    ("1.2 million", "1200000", N, 0, 0, True, "numeric"),
    ("1.2 million", "1.2", N, 0, 0, False, "numeric"),
    ("3 thousand flights", "3000", N, 0, 0, True, "numeric"),
    ("5k", "5000", N, 0, 0, True, "numeric"),
    ("2.50", "2.5", N, 0, 0, True, "numeric"),
    ("2.500000", "2.5", N, 0, 0, True, "numeric"),
    ("42.0", "42", N, 0, 0, True, "numeric"),
    ("42", "42.00", N, 0, 0, True, "numeric"),
    (".5", "0.5", N, 0, 0, True, "numeric"),
    ("007", "7", N, 0, 0, True, "numeric"),
    ("0.1", "0.10000000000000001", N, 0, 0, True, "numeric"),
    ("0.30000000000000004", "0.3", N, 0, 0, True, "numeric"),
    ("0.50000001", "0.5", N, 0, 0, False, "numeric"),  # 2e-8 relative: a different value, not float noise
    ("0.5", "0.50000001", N, 0, 0, False, "numeric"),
    ("1234567.8900000001", "1234567.89", N, 0, 0, True, "numeric"),  # below 1e-9 relative: binary noise
    ("3 to four", "3", N, 0, 0, False, "numeric"),
    ("3 and 4", "3", N, 0, 0, False, "numeric"),
    ("3 4", "3", N, 0, 0, False, "numeric"),
    ("three", "3", N, 0, 0, False, "numeric"),
    ("forty-two", "42", N, 0, 0, False, "numeric"),
    ("1, 2, 3", "3", N, 0, 0, False, "numeric"),
    ("1,2,3", "3", N, 0, 0, False, "numeric"),
    ("nan", "1", N, 0, 0, False, "numeric"),
    ("inf", "1", N, 0, 0, False, "numeric"),
    ("0x10", "16", N, 0, 0, False, "numeric"),
    # --- percent / fraction bridging
    ("15%", "0.15", N, 0, 0, True, "numeric"),
    ("15", "0.15", N, 0, 0, False, "numeric"),  # two bare numbers never bridge
    ("0.15", "15", N, 0, 0, False, "numeric"),
    ("25%", "0.25", N, 0, 0, True, "numeric"),
    ("25%", "25", N, 0, 0, True, "numeric"),
    ("0.25", "25%", N, 0, 0, True, "numeric"),
    ("25", "25%", N, 0, 0, True, "numeric"),
    ("25 %", "0.25", N, 0, 0, True, "numeric"),
    ("25 percent", "0.25", N, 0, 0, True, "numeric"),
    ("25 per cent", "25%", N, 0, 0, True, "numeric"),
    ("25.0%", "25%", N, 0, 0, True, "numeric"),
    ("26%", "0.25", N, 0, 0, False, "numeric"),
    ("0.253", "25%", N, 0.5, 0, True, "numeric"),  # tolerance is in the gold's units
    ("0.26", "25%", N, 0.5, 0, False, "numeric"),
    ("1/4", "0.25", N, 0, 0, True, "numeric"),
    ("-3/4", "-0.75", N, 0, 0, True, "numeric"),
    ("3 / 4", "0.75", N, 0, 0, True, "numeric"),
    ("1/3", "0.333", N, 0.0005, 0, True, "numeric"),
    ("1/3", "0.333", N, 0, 0, False, "numeric"),
    ("1/0", "1", N, 0, 0, False, "numeric"),
    ("0.25", "1/4", N, 0, 0, True, "numeric"),
    # --- tolerance edges: |a - g| <= atol + rtol*|g|
    ("10.5", "10", N, 0.5, 0, True, "numeric"),
    ("10.51", "10", N, 0.5, 0, False, "numeric"),
    ("9.5", "10", N, 0.5, 0, True, "numeric"),
    ("9.49", "10", N, 0.5, 0, False, "numeric"),
    ("101", "100", N, 0, 0.01, True, "numeric"),
    ("101.01", "100", N, 0, 0.01, False, "numeric"),
    ("-101", "-100", N, 0, 0.01, True, "numeric"),
    ("101.5", "100", N, 0.5, 0.01, True, "numeric"),
    ("101.6", "100", N, 0.5, 0.01, False, "numeric"),
    ("3.14159", "3.14", N, 0.005, 0, True, "numeric"),
    ("3.146", "3.14", N, 0.005, 0, False, "numeric"),
    ("1000001", "1000000", N, 0, 0, False, "numeric"),
    ("0.0001", "0", N, 0, 0, False, "numeric"),
    ("0.00", "0", N, 0, 0, True, "numeric"),
    ("-0", "0", N, 0, 0, True, "numeric"),
    # --- math-verify, the last resort for LaTeX
    (r"\frac{1}{4}", "0.25", N, 0, 0, True, "math_verify"),
    (r"\dfrac{3}{4}", "0.75", N, 0, 0, True, "math_verify"),
    (r"$\frac{1}{4}$", "0.25", N, 0, 0, True, "math_verify"),
    (r"\(\frac{1}{4}\)", "0.25", N, 0, 0, True, "math_verify"),
    (r"$-\frac{3}{4}$", "-0.75", N, 0, 0, True, "math_verify"),
    (r"\boxed{42}", "42", N, 0, 0, True, "math_verify"),
    (r"\boxed{41}", "42", N, 0, 0, False, "math_verify"),
    (r"\boxed{\frac{1}{4}}", "0.25", N, 0, 0, True, "math_verify"),
    (r"\boxed{1{,}234}", "1234", N, 0, 0, True, "math_verify"),
    (r"\boxed{1,234}", "1234", N, 0, 0, True, "math_verify"),
    (r"2^{10}", "1024", N, 0, 0, True, "math_verify"),  # bare, math-verify would read 2
    (r"2^{10}", "2", N, 0, 0, False, "math_verify"),
    (r"10^{6}", "1000000", N, 0, 0, True, "math_verify"),
    (r"$3.5 \times 10^{6}$", "3500000", N, 0, 0, True, "math_verify"),
    (r"\sqrt{2}", "1.41421", N, 0.000005, 0, True, "math_verify"),
    (r"\frac{1}{3}", "0.333333", N, 0, 0, False, "math_verify"),  # no 1e-6 rounding slack
    (r"\frac{1}{3}", "0.333333", N, 5e-7, 0, True, "math_verify"),
    (r"$15\%$", "0.15", N, 0, 0, True, "math_verify"),
    (r"\boxed{15\%}", "15%", N, 0, 0, True, "math_verify"),
    (r"\boxed{15}", "0.15", N, 0, 0, False, "math_verify"),
    (r"\boxed{1e6}", "1000000", N, 0, 0, True, "math_verify"),  # not read as 1 or 6e
    (r"\boxed{1e6}", "1", N, 0, 0, False, "math_verify"),
    (r"$1, 2, 3$", "3", N, 0, 0, False, "math_verify"),
    (r"\boxed{1, 2, 3}", "3", N, 0, 0, False, "math_verify"),
    (r"\boxed{3}, \boxed{4}", "3", N, 0, 0, False, "math_verify"),
    (r"\boxed{3} \boxed{4}", "3", N, 0, 0, False, "math_verify"),
    (r"$x = \frac{1}{2}$", "0.5", N, 0, 0, True, "math_verify"),
    (r"$x$", "1", N, 0, 0, False, "math_verify"),
    (r"\text{many}", "1", N, 0, 0, False, "math_verify"),
    (r"\mathbf{42}", "42", N, 0, 0, True, "math_verify"),
    (r"$10^{10^{10^{10}}}$", "1", N, 0, 0, False, "math_verify"),
    (r"$9^{9^{9}}$", "1", N, 0, 0, False, "math_verify"),
    (r"\binom{2000000}{1000000}", "1", N, 0, 0, False, "math_verify"),
    (r"$100000!$", "1", N, 0, 0, False, "math_verify"),
    (r"$\frac{1}{0}$", "1", N, 0, 0, False, "math_verify"),
    ("$" + "{" * 30 + "1" + "}" * 30 + "$", "1", N, 0, 0, False, "math_verify"),
    ("$" + "+".join(["1"] * 150) + "$", "150", N, 0, 0, False, "math_verify"),
    (r"\infty", "1", N, 0, 0, False, "math_verify"),
    (r"$\frac{1}{4}$ kg", "0.25", N, 0, 0, True, "math_verify"),
    (r"\boxed{0.25} kg", "0.25", N, 0, 0, True, "math_verify"),
    (r"$$\frac{1}{4}$$", "0.25", N, 0, 0, True, "math_verify"),
    (r"\[\frac{1}{4}\]", "0.25", N, 0, 0, True, "math_verify"),
    (r"\$\frac{1}{4}", "0.25", N, 0, 0, True, "math_verify"),
    (r"The answer is $\frac{1}{4}$", "0.25", N, 0, 0, True, "math_verify"),
    (r"I think it's $\frac{1}{4}$", "0.25", N, 0, 0, False, "math_verify"),
    (r"not \boxed{0.25}", "0.25", N, 0, 0, False, "math_verify"),
    (r"\boxed{0.25} not", "0.25", N, 0, 0, False, "math_verify"),
    (r"$\frac{1}{4}$ and $\frac{1}{4}$", "0.25", N, 0, 0, False, "math_verify"),
    (r"$\frac{1}{4}$ not $\frac{1}{2}$", "0.5", N, 0, 0, False, "math_verify"),
    # --- lists: order-insensitive multisets
    ("1, 2, 3", "9, 9, 3", L, 0, 0, False, "list"),
    ("3, 2, 1", "1, 2, 3", L, 0, 0, True, "list"),
    ("1, 2, 3", "1, 2, 3", L, 0, 0, True, "exact"),
    ("[1, 2, 3]", "1, 2, 3", L, 0, 0, True, "list"),
    ("(1, 2, 3)", "3, 2, 1", L, 0, 0, True, "list"),
    ("['AA', 'UA', 'DL']", "DL, UA, AA", L, 0, 0, True, "list"),
    ('["aa", "ua"]', "UA, AA", L, 0, 0, True, "list"),
    ("AA; UA; DL", "DL, UA, AA", L, 0, 0, True, "list"),
    ("AA\nUA\nDL", "DL, UA, AA", L, 0, 0, True, "list"),
    ("- AA\n- UA\n- DL", "DL, UA, AA", L, 0, 0, True, "list"),
    ("1. AA\n2. UA", "UA, AA", L, 0, 0, True, "list"),
    ("AA, UA", "DL, UA, AA", L, 0, 0, False, "list"),
    ("AA, UA, DL, B6", "DL, UA, AA", L, 0, 0, False, "list"),
    ("AA, AA, UA", "AA, UA, UA", L, 0, 0, False, "list"),
    ("AA, UA, UA", "UA, AA, UA", L, 0, 0, True, "list"),
    ("1.0, 2.50", "2.5, 1", L, 0, 0, True, "list"),
    ("1.01, 2", "1, 2", L, 0.01, 0, True, "list"),
    ("1.02, 2", "1, 2", L, 0.01, 0, False, "list"),
    ("1,234; 5,678", "5678; 1234", L, 0, 0, True, "list"),
    ("25%, 50%", "0.5, 0.25", L, 0, 0, True, "list"),
    ("AA, UA,", "UA, AA", L, 0, 0, True, "list"),
    ("AA, UA or DL", "UA, AA", L, 0, 0, False, R),
    ("[]", "AA", L, 0, 0, False, "list"),
    ("AA", "AA", L, 0, 0, True, "exact"),
    ("[AA]", "AA", L, 0, 0, True, "list"),
    ("ten, 2", "10, 2", L, 0, 0, False, "list"),
    # --- booleans
    ("yes", "True", B, 0, 0, True, "bool"),
    ("Yes.", "true", B, 0, 0, True, "bool"),
    ("TRUE", "true", B, 0, 0, True, "exact"),
    ("y", "True", B, 0, 0, True, "bool"),
    ("1", "True", B, 0, 0, True, "bool"),
    ("no", "False", B, 0, 0, True, "bool"),
    ("n", "False", B, 0, 0, True, "bool"),
    ("0", "no", B, 0, 0, True, "bool"),
    ("false", "0", B, 0, 0, True, "bool"),
    ("no", "True", B, 0, 0, False, "bool"),
    ("yes", "False", B, 0, 0, False, "bool"),
    ("probably", "True", B, 0, 0, False, "bool"),
    ("2", "True", B, 0, 0, False, "bool"),
    # --- ungraded: a task bug, never the agent's fault
    ("42", "42", "integer", 0, 0, None, "ungraded"),
    ("42", "", N, 0, 0, None, "ungraded"),
    ("42", "forty-two", N, 0, 0, None, "ungraded"),
    ("42", "nan", N, 0, 0, None, "ungraded"),
    ("yes", "perhaps", B, 0, 0, None, "ungraded"),
    ("a", "[]", L, 0, 0, None, "ungraded"),
    ("a", "   ", S, 0, 0, None, "ungraded"),
]


@pytest.mark.parametrize(
    ("answer", "gold", "answer_type", "atol", "rtol", "expected", "method"),
    CASES,
    ids=[f"{i:03d}-{str(c[0])[:24]!r}-{c[2]}" for i, c in enumerate(CASES)],
)
def test_grade_table(answer, gold, answer_type, atol, rtol, expected, method):
    result = grade_answer(answer, gold, answer_type, atol, rtol)
    assert result.correct is expected, result
    assert result.reward == {True: 1.0, False: 0.0, None: None}[expected]
    assert result.graded is (expected is not None)
    if method is not None:
        assert result.method == method, result
    if expected is not True:
        assert result.note, "a wrong or ungraded grade must say why"


def test_table_is_large():
    assert len(CASES) >= 150


def test_notes_name_the_cause():
    assert "answer too long" in grade_answer("1" * 10_001, "1", N).note
    assert "empty answer" in grade_answer("", "1", N).note
    assert "UTF-8" in grade_answer(b"\xff\xfe", "1", N).note
    assert "timed out" not in grade_answer(r"\frac{1}{4}", "0.25", N).note
    assert "answer_type" in grade_answer("1", "1", "integer").note


def test_ten_megabyte_answer_is_wrong_quickly():
    for big in ("7" * 10_000_000, " " * 5_000_000 + "7" + "x" * 5_000_000, b"1," * 5_000_000):
        start = time.perf_counter()
        result = grade_answer(big, "7", N)
        assert time.perf_counter() - start < 1.0
        assert result.correct is False and result.method == R
        assert "answer too long" in result.note


def test_longest_allowed_answers_grade_quickly():
    adversarial = [
        "1" * 9_999,
        "1 " * 4_999,
        "1," * 4_999,
        "$" + "{" * 4_999,
        "(" * 9_999,
        ", ".join(str(i) for i in range(2_000)),
        "9" * 400 + "e" + "9" * 400,
        ">" * 9_999,
        ">a" * 4_999,
        "- a\n" * 2_499,
        "a;" * 4_999,
        "`" * 9_999,
        "123 " * 2_499,
    ]
    gold_list = ", ".join(str(i) for i in reversed(range(2_000)))
    start = time.perf_counter()
    for text in adversarial:
        for answer_type, gold in ((N, "1"), (L, gold_list), (S, "a"), (B, "yes")):
            assert grade_answer(text, gold, answer_type).graded
    assert time.perf_counter() - start < 5.0


def test_long_reversed_list_is_correct_and_quick():
    gold = ", ".join(str(i) for i in range(1_200))
    answer = "; ".join(f"{i}.0" for i in reversed(range(1_200)))
    start = time.perf_counter()
    assert grade_answer(answer, gold, L).correct is True
    assert time.perf_counter() - start < 1.0


def test_grade_is_frozen_and_three_way():
    right, wrong, ungraded = (grade_answer("1", "1", N), grade_answer("2", "1", N), grade_answer("1", "1", "nope"))
    assert (right.reward, wrong.reward, ungraded.reward) == (1.0, 0.0, None)
    assert (right.graded, wrong.graded, ungraded.graded) == (True, True, False)
    assert isinstance(right, Grade)
    with pytest.raises(AttributeError):
        right.reward = 0.0  # type: ignore[misc]


def make_task(gold: str = "42", answer_type: str = N, atol: float = 0.0, rtol: float = 0.0) -> Task:
    return Task(
        task_id="t-1",
        instruction="How many?",
        data_files=("flights.csv",),
        answer_type=answer_type,
        difficulty_level=1,
        difficulty_tier="easy",
        cpus=1,
        memory_mb=256,
        sources=(),
        gold=gold,
        atol=atol,
        rtol=rtol,
        solution="print(42)",
        template_id="count",
    )


def test_grade_reads_gold_type_and_tolerance_from_the_task():
    assert grade(make_task("42"), "42").correct is True
    assert grade(make_task("42"), b"42.0\n").method == "numeric"
    assert grade(make_task("10", atol=0.5), "10.4").correct is True
    assert grade(make_task("10", atol=0.5), "10.6").correct is False
    assert grade(make_task("100", rtol=0.01), "101").correct is True
    assert grade(make_task("AA, UA", L), "[UA, AA]").correct is True
    assert grade(make_task("True", B), "yes").correct is True
    assert grade(make_task("Paris", S), "paris").correct is True


@pytest.mark.failure_mode("F14")
def test_grading_through_the_public_view_raises():
    public = make_task().public()
    with pytest.raises(GraderError, match="full Task server-side"):
        grade(public, "42")
    with pytest.raises(GraderError, match="F14"):
        grade(object(), "42")  # type: ignore[arg-type]


def test_math_verify_works_off_the_main_thread():
    answers = [(rf"\frac{{{i}}}{{8}}", str(i / 8)) for i in range(1, 25)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda pair: grade_answer(pair[0], pair[1], N), answers))
    assert [r.method for r in results] == ["math_verify"] * len(answers)
    assert all(r.correct for r in results), [r for r in results if not r.correct]


def test_pathological_latex_returns_within_a_bound_off_the_main_thread():
    pathological = [
        r"$10^{10^{10^{10}}}$",
        r"\binom{2000000}{1000000}",
        r"$(10^{9})!$",
        "$" + "{" * 200 + "1" + "}" * 200 + "$",
        r"\frac{1}{4}" * 18,
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda text: grade_answer(text, "1", N), pathological))
    assert time.perf_counter() - start < 10.0
    assert all(r.correct is False and r.note for r in results), results


def test_math_verify_timeout_is_a_wrong_grade_not_a_hang():
    slow = "${{{{{" + "7" + "}}}}}$"  # math-verify needs ~0.5 s for five brace levels
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(grade_latex, slow, (7.0, False), 0.0, 0.0, 0.01).result()
    assert time.perf_counter() - start < 0.5
    assert result.correct is False and result.method == "math_verify"
    assert "math-verify timed out" in result.note


_PIECES = st.sampled_from(
    [
        *"0123456789.,-+eE%$/ \n\\{}^()[]'\"`*_?<>abxy;:",
        "\\frac",
        "\\boxed",
        "\u2212",
        "\u00a0",
        " or ",
        "10^",
        "$",
        "echo ",
        "answer: ",
        "yes",
        "no",
    ]
)
_TEXT = st.lists(_PIECES, max_size=20).map("".join)
_TYPES = st.sampled_from([N, S, L, B])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(answer=_TEXT | st.binary(max_size=30), gold=_TEXT, answer_type=_TYPES)
def test_any_answer_gets_a_grade_never_an_exception(answer, gold, answer_type):
    result = grade_answer(answer, gold, answer_type, 0.5, 0.01)
    assert (result.reward is None) == (result.correct is None)
    assert result.method in {"exact", "numeric", "list", "bool", "math_verify", R, "ungraded"}
    assert result.correct is True or result.note


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(gold=_TEXT, answer_type=_TYPES)
def test_gold_graded_against_itself_is_never_wrong(gold, answer_type):
    assert grade_answer(gold, gold, answer_type).correct is not False
