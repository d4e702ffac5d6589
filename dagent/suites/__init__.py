"""Task suites beyond the bundled build: where a suite comes from (`sources`: a local directory,
a Hub dataset repo, `hf://datasets/...`, bucket tables), your own questions and tables made into a
suite (`importer`), a suite checked before use (`check`) and pushed to the Hub (`push`).
"""
