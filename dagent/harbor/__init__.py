"""dagent's tasks as a Harbor catalog, and Harbor run without Docker.

- `grader`: the verifier every exported task runs (`tests/grader.py`); it imports the very
  `dagent.grading` modules, copied byte for byte into the task (`tests/lib/dagent/`).
- `provider`: a Harbor environment provider (`harbor run -e dagent.harbor.provider:SandboxEnvironment`)
  backed by dagent's local bubblewrap sandbox. It imports `harbor`, which needs Python 3.12 or 3.13 and
  lives in its own venv (`.venv-harbor`), so nothing else in dagent imports it.

- `export`: the exporter (`dagent export harbor`): each task as a Harbor task directory, the catalog,
  its verification and its push to the Hub.
"""
