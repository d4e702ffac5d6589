"""More question shapes for every table: yes/no comparisons, derived columns, ratios between
groups, rankings with ties, multi-step questions and record (several named values) answers.

The same rules as `templates.py`: the data only picks parameters; the gold is what the program prints.
`generic` is every generic question of one table: the templates' tiers, then these shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pandas as pd

from datasets_build.tables import Table
from datasets_build.templates import (
    TWO_DP,
    Candidate,
    Ctx,
    clear_top,
    easy,
    hard,
    is_code,
    level_lit,
    level_text,
    medium,
    num_out,
)

# columns whose sum means nothing (a year, an age, a rate, a score): the "total" question skips them
NOT_SUMMABLE = re.compile(
    r"year|\bage\b|date|rank|score|rate|ratio|percent|%|proportion|share|index|"
    r"return|average|mean|median|per |grade|gpa|latitude|longitude|price",
    re.I,
)


def shapes(x: Ctx) -> Iterator[Candidate]:
    t, df = x.t, x.df
    for n in x.pick("mean_vs_median", x.nums, 1):
        s = df[n].dropna()
        if round(float(s.mean()), 6) != round(float(s.median()), 6):
            yield x.cand(
                "mean_vs_median",
                (n,),
                f"Is the mean {x.name(n)} greater than its median?{x.missing(n)} Answer yes or no.",
                [f"s = df[{n!r}].dropna()", "print('yes' if s.mean() > s.median() else 'no')"],
                "bool",
                0,
                1,
                [n],
            )
    summable = [n for n in x.nums if x.nonzero(df[n].sum()) and not NOT_SUMMABLE.search(f"{n} {t.cols[n]}")]
    for n in x.pick("total", summable, 1):
        yield x.cand(
            "total",
            (n,),
            f"What is the sum of {x.name(n)} over all {t.plural}?{x.missing(n)} {TWO_DP}",
            [num_out(f"df[{n!r}].sum()", 2)],
            "number",
            0.01,
            1,
            [n],
        )
    pairs = [(c, a, b) for c in x.cats for a in x.levels(c) for b in x.levels(c) if str(a) < str(b)]
    for c, a, b in x.pick("more_rows", pairs, 1):
        if (df[c] == a).sum() != (df[c] == b).sum():
            yield x.cand(
                "more_rows",
                (c, str(a), str(b)),
                f"Are there more {t.plural} whose {x.name(c)} "
                f"is {level_text(a)} than {t.plural} whose `{c}` is {level_text(b)}? Answer yes or no.",
                [
                    f"print('yes' if (df[{c!r}] == {level_lit(a)}).sum() > (df[{c!r}] == {level_lit(b)}).sum() "
                    "else 'no')"
                ],
                "bool",
                0,
                1,
                [c],
            )
    for n in x.pick("iqr", x.nums, 1):
        yield x.cand(
            "iqr",
            (n,),
            f"What is the interquartile range of {x.name(n)} (the 75th minus the "
            f"25th percentile, with linear interpolation between data points)?{x.missing(n)} {TWO_DP}",
            [f"s = df[{n!r}].dropna()", num_out("s.quantile(0.75) - s.quantile(0.25)", 2)],
            "number",
            0.01,
            2,
            [n],
        )
    for n in x.pick("zmax", x.nums, 1):
        yield x.cand(
            "zmax",
            (n,),
            f"Standardise {x.name(n)}: subtract its mean and divide by its sample "
            f"standard deviation (n - 1 in the denominator). What is the largest standardised value?"
            f"{x.missing(n)} {TWO_DP}",
            [f"s = df[{n!r}].dropna()", num_out("((s - s.mean()) / s.std()).max()", 2)],
            "number",
            0.01,
            2,
            [n],
        )
    quads = [(c, a, b, n) for c, a, b in pairs for n in x.nums]
    for c, a, b, n in x.pick("group_ratio", quads, 1):
        ma, mb = df.loc[df[c] == a, n].mean(), df.loc[df[c] == b, n].mean()
        if pd.notna(ma) and pd.notna(mb) and ma > 0 and mb > 0:
            yield x.cand(
                "group_ratio",
                (c, str(a), str(b), n),
                f"What is the ratio of the mean {x.name(n)} "
                f"of the {t.plural} whose {x.name(c)} is {level_text(a)} to the mean `{n}` of those whose "
                f"`{c}` is {level_text(b)} (the first mean divided by the second)?{x.missing(n)} {TWO_DP}",
                [*x.two_groups(c, a, b, n, "mean"), num_out("a / b", 2)],
                "number",
                0.01,
                2,
                [c, n],
            )
    for n in x.pick("record_summary", x.nums, 1):
        yield x.cand(
            "record_summary",
            (n,),
            f"Summarise {x.name(n)}: give its mean, median and number of "
            f'recorded values as a JSON object with exactly the keys "mean", "median" and '
            f'"count" (mean and median rounded to two decimal places; count a whole number).',
            [
                "import json",
                f"s = df[{n!r}].dropna()",
                "print(json.dumps({'mean': round(float(s.mean()), 2) + 0.0, "
                "'median': round(float(s.median()), 2) + 0.0, 'count': int(s.count())}))",
            ],
            "record",
            0.01,
            2,
            [n],
            fields=(("count", 0.0, 0.0),),
        )
    combos = [(c, n) for c in x.cats for n in x.nums]
    biggest = [(c, n) for c, n in combos if clear_top(df[c].value_counts())]
    for c, n in x.pick("record_group", biggest, 1):
        yield x.cand(
            "record_group",
            (c, n),
            f"Find the most common value of {x.name(c)}. Give that value, "
            f"how many {t.plural} have it, and their mean {x.name(n)} as a JSON object with exactly the "
            f'keys "value", "count" and "mean" (the mean rounded to two decimal places).'
            f"{x.missing(n)}",
            [
                "import json",
                f"vc = df[{c!r}].value_counts()",
                "top = vc.idxmax()",
                f"m = df.loc[df[{c!r}] == top, {n!r}].mean()",
                f"v = int(top) if {is_code(df[c])!r} else str(top)",
                "print(json.dumps({'value': v, 'count': int(vc.max()), 'mean': round(float(m), 2) + 0.0}))",
            ],
            "record",
            0.01,
            3,
            [c, n],
            fields=(("count", 0.0, 0.0),),
        )
    tied = [(c, n) for c, n in combos if df[c].nunique() >= 3 and df.groupby(c)[n].median().dropna().duplicated().any()]
    for c, n in x.pick("rank_ties", tied or combos, 1):
        m = df.groupby(c)[n].median().dropna()
        if len(m) >= 3:
            v = sorted(m.index, key=str)[x.rng("rank_ties_level").randrange(len(m))]
            yield x.cand(
                "rank_ties",
                (c, str(v), n),
                f"Rank the values of {x.name(c)} by the median "
                f"{x.name(n)} of their {t.plural}, highest first; values with equal medians share "
                f"the best position (1, 2, 2, 4). What position does {level_text(v)} get?{x.missing(n)}",
                [
                    f"m = df.groupby({c!r})[{n!r}].median().dropna()",
                    f"print(int(m.rank(method='min', ascending=False)[{level_lit(v)}]))",
                ],
                "number",
                0,
                3,
                [c, n],
            )
    steps = [(n1, c, n2) for n1 in x.nums for c in x.cats for n2 in x.nums if n1 != n2]
    for n1, c, n2 in x.pick("multi_step", steps, 1):
        d = df[df[n1] > df[n1].mean()]
        m = d.groupby(c)[n2].mean().dropna()
        if len(m) >= 2 and (m == m.max()).sum() == 1:
            yield x.cand(
                "multi_step",
                (n1, c, n2),
                f"Take the {t.plural} whose {x.name(n1)} is above the "
                f"mean of `{n1}`. Among them, which value of {x.name(c)} has the highest mean "
                f"{x.name(n2)}?{x.missing(n2)} {x.tie(c)}",
                [
                    f"d = df[df[{n1!r}] > df[{n1!r}].mean()]",
                    f"m = d.groupby({c!r})[{n2!r}].mean().dropna()",
                    x.out_level(c, "m.idxmax()"),
                ],
                x.kind(c),
                0,
                3,
                [n1, c, n2],
            )
    for c, n in x.pick("step_stat", biggest, 1):
        yield x.cand(
            "step_stat",
            (c, n),
            f"Find the most common value of {x.name(c)}, then give the median "
            f"{x.name(n)} of the {t.plural} with that value.{x.missing(n)} {TWO_DP}",
            [f"top = df[{c!r}].value_counts().idxmax()", num_out(f"df.loc[df[{c!r}] == top, {n!r}].median()", 2)],
            "number",
            0.01,
            3,
            [c, n],
        )
    splits = [(n1, n2) for n1 in x.nums for n2 in x.nums if n1 != n2]
    for n1, n2 in x.pick("median_split", splits, 1):
        yield x.cand(
            "median_split",
            (n1, n2),
            f'Derive a column that is "high" when {x.name(n1)} is above '
            f'its median and "low" otherwise (leave out rows missing `{n1}` or `{n2}`). How much '
            f'higher is the mean {x.name(n2)} of the "high" {t.plural} than that of the "low" ones '
            f"(negative if lower)? {TWO_DP}",
            [
                f"d = df.dropna(subset=[{n1!r}, {n2!r}])",
                f"high = d[{n1!r}] > d[{n1!r}].median()",
                num_out(f"d.loc[high, {n2!r}].mean() - d.loc[~high, {n2!r}].mean()", 2),
            ],
            "number",
            0.01,
            3,
            [n1, n2],
        )


def generic(t: Table, df: pd.DataFrame) -> list[Candidate]:
    """Every generic question for one table, in a fixed order: the templates' tiers, then the shapes."""
    x = Ctx(t, df)
    return [*easy(x), *medium(x), *hard(x), *shapes(x)]
