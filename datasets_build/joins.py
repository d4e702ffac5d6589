"""Join questions over real relational tables: a fact table and a lookup table that share a key.

Each `Relation` names the two tables, the key, the lookup column questions group by and the fact
columns they measure. The questions cannot be answered from either file alone: the group lives in
one, the measure (or the rows counted) in the other. As everywhere, the data only chooses
parameters (groups with enough rows, clear winners); the gold is what the program prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd

from datasets_build.catalogue import by_key
from datasets_build.templates import TIE, TWO_DP, Candidate, clear_top, program, reader


@dataclass(frozen=True)
class Relation:
    fact: str  # table key
    lookup: str  # table key
    on: str  # key column in both
    group: str  # lookup column to group by
    group_name: str
    measures: Mapping[str, str]  # fact column -> human name
    rows: str  # what a fact row is, plural ("captures")


RELATIONS = (
    Relation(
        "surveys",
        "species",
        "species_id",
        "genus",
        "genus",
        {"weight": "weight in grams", "hindfoot_length": "hindfoot length in mm"},
        "captures",
    ),
    Relation(
        "surveys",
        "species",
        "species_id",
        "taxa",
        "taxon (bird, rodent, rabbit, reptile)",
        {"weight": "weight in grams"},
        "captures",
    ),
    Relation(
        "surveys",
        "plots",
        "plot_id",
        "plot_type",
        "plot type",
        {"weight": "weight in grams", "hindfoot_length": "hindfoot length in mm"},
        "captures",
    ),
    Relation(
        "results_us_election_2016",
        "murders",
        "state",
        "region",
        "census region",
        {"trump": "vote share of Trump in percent", "clinton": "vote share of Clinton in percent"},
        "states",
    ),
)


def _levels(df: pd.DataFrame, col: str, n: int = 4) -> list:
    vc = df[col].value_counts()
    return sorted(vc[vc >= 5].index.tolist(), key=str)[:n]


def relation_questions(r: Relation, tables_dir) -> Iterator[Candidate]:
    t = by_key()
    fact, look = t[r.fact], t[r.lookup]

    def load(tb):
        path = tables_dir / tb.file
        return pd.read_parquet(path) if tb.fmt == "parquet" else pd.read_csv(path)

    d = load(fact).merge(load(look)[[r.on, r.group]], on=r.on)
    files = f"{fact.basename} and {look.basename}"
    head = [reader(fact, name="f"), reader(look, name="g"), f"d = f.merge(g[[{r.on!r}, {r.group!r}]], on={r.on!r})"]
    link = f"Join {files} on `{r.on}`; the {r.group_name} (column `{r.group}`) is in {look.basename}."

    def cand(
        tid: str, params: tuple, question: str, lines, answer_type: str, atol: float, level: int, fields: tuple = ()
    ) -> Candidate:
        return Candidate(
            (fact, look),
            tid,
            (fact.key, r.group, tid, *params),
            f"{link} {question}",
            program(*head, *lines),
            answer_type,
            atol,
            level,
            field_tolerances=fields,
        )

    counts = d[r.group].value_counts()
    if clear_top(counts):
        yield cand(
            "join_most_rows",
            (),
            f"Which {r.group_name} has the most {r.rows}? {TIE}",
            [f"vc = d[{r.group!r}].value_counts().sort_index(kind='stable')", "print(vc.idxmax())"],
            "string",
            0,
            2,
        )
    for v in _levels(d, r.group, 2):
        yield cand(
            "join_count",
            (str(v),),
            f'How many {r.rows} belong to the {r.group_name} "{v}"?',
            [f"print(int((d[{r.group!r}] == {v!r}).sum()))"],
            "number",
            0,
            2,
        )
    for n, human in r.measures.items():
        m = d.groupby(r.group)[n].mean().dropna()
        if len(m) >= 2 and (m == m.max()).sum() == 1:
            yield cand(
                "join_group_max",
                (n,),
                f"Which {r.group_name} has the highest mean {human} "
                f"(column `{n}` of {fact.basename})? Ignore missing values. {TIE}",
                [f"m = d.groupby({r.group!r})[{n!r}].mean().dropna()", "print(m.idxmax())"],
                "string",
                0,
                2,
            )
        for v in _levels(d, r.group, 1):
            if d.loc[d[r.group] == v, n].notna().any():
                yield cand(
                    "join_record",
                    (n, str(v)),
                    f'For the {r.group_name} "{v}", give the number of '
                    f"{r.rows} with a recorded {human} (column `{n}`) and their mean {human} as a JSON "
                    f'object with exactly the keys "count" and "mean" (the mean rounded to two '
                    f"decimal places).",
                    [
                        "import json",
                        f"s = d.loc[d[{r.group!r}] == {v!r}, {n!r}].dropna()",
                        "print(json.dumps({'count': int(s.count()), 'mean': round(float(s.mean()), 2) + 0.0}))",
                    ],
                    "record",
                    0.01,
                    3,
                    fields=(("count", 0.0, 0.0),),
                )
        thr = round(float(d[n].median()), 1)
        yield cand(
            "join_share_above",
            (n, thr),
            f"Among the {r.rows} whose {human} (column `{n}`) is above "
            f"{thr}, which {r.group_name} accounts for the largest share? {TIE}",
            [
                f"vc = d.loc[d[{n!r}] > {thr!r}, {r.group!r}].value_counts().sort_index(kind='stable')",
                "print(vc.idxmax())",
            ],
            "string",
            0,
            3,
        )
        yield cand(
            "join_group_diff",
            (n,),
            f"What is the difference between the highest and the lowest mean "
            f"{human} (column `{n}`) across the {r.group_name} groups? Ignore missing values. {TWO_DP}",
            [f"m = d.groupby({r.group!r})[{n!r}].mean().dropna()", "print(round(float(m.max() - m.min()), 2) + 0.0)"],
            "number",
            0.01,
            3,
        )


def joins(tables_dir) -> list[Candidate]:
    return [c for r in RELATIONS for c in relation_questions(r, tables_dir)]
