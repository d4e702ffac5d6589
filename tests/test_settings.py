"""Every environment variable dagent reads is listed once (dagent.settings.VARIABLES), documented
in docs/settings.md, and read only through `dagent.settings` (the servers through one frozen record
each). The scanner reads the source with `ast`: a literal `environ.get("NAME")`, `environ["NAME"]`
or `getenv("NAME")` of a listed or DAGENT_ variable anywhere else is named with its place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from dagent import settings
from dagent.errors import ConfigError
from dagent.settings import PASSED_TO_PROCESSES, VARIABLES, BlackboxServerSettings, WhiteboxServerSettings

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    *sorted((ROOT / "dagent").rglob("*.py")),
    ROOT / "app.py",
    *sorted((ROOT / "spaces").rglob("*.py")),
    *sorted((ROOT / "jobs").glob("*.py")),
]


def direct_reads(path: Path, text: str | None = None) -> list[str]:
    """`path:line NAME` for each literal read of a listed or DAGENT_ variable outside dagent.settings."""
    tree = ast.parse(text if text is not None else path.read_text(encoding="utf-8"))
    found = []

    def named(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
            if (name in VARIABLES or name.startswith("DAGENT_")) and name not in PASSED_TO_PROCESSES:
                return name
        return None

    def environ_like(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id in ("environ", "env")
        )

    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if (node.func.attr == "get" and environ_like(node.func.value)) or node.func.attr == "getenv":
                name = named(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and environ_like(node.value):
            name = named(node.slice)
        if name:
            found.append(f"{path.relative_to(ROOT) if path.is_absolute() else path}:{node.lineno} {name}")
    return found


def test_no_module_reads_a_setting_but_dagent_settings():
    reads = [r for p in SOURCES if p.name != "settings.py" or p.parent.name != "dagent" for r in direct_reads(p)]
    assert reads == [], "read these through dagent.settings.read (and list new ones in VARIABLES)"


def test_the_scanner_names_a_planted_direct_read():
    planted = (
        'import os\nx = os.environ.get("DAGENT_SUITE")\ny = os.environ["PORT"]\nz = os.getenv("DAGENT_NEW")\n'
        'os.environ["DAGENT_PROJECT_URL"] = "set, not read"\nw = os.environ.get("DAGENT_TOOL_ARGS")\n'
    )
    assert direct_reads(Path("planted.py"), planted) == [
        "planted.py:2 DAGENT_SUITE",
        "planted.py:3 PORT",
        "planted.py:4 DAGENT_NEW",
    ]


def test_every_listed_variable_is_documented_and_the_page_names_no_other():
    page, passed = (ROOT / "docs" / "settings.md").read_text().split("## Set by dagent")
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", page, re.M))
    assert documented == set(VARIABLES), (sorted(set(VARIABLES) - documented), sorted(documented - set(VARIABLES)))
    assert set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", passed, re.M)) == set(PASSED_TO_PROCESSES)
    for name, variable in VARIABLES.items():  # the page's default is the code's
        row = re.search(rf"^\| `{name}` \| ([^|]*) \|", page, re.M)
        assert row and row.group(1).strip().strip("`") == (variable.default or "-"), (name, row and row.group(1))


def test_read_takes_empty_as_unset_and_refuses_an_unlisted_name():
    assert (
        settings.read("DAGENT_SANDBOX", {}) == "local"
        and settings.read("DAGENT_SANDBOX", {"DAGENT_SANDBOX": ""}) == "local"
    )
    assert settings.read("DAGENT_SANDBOX", {"DAGENT_SANDBOX": "e2b"}) == "e2b"
    assert settings.read("DAGENT_SUITE", {}) is None
    with pytest.raises(ConfigError, match="DAGENT_NOPE is not a listed setting: add it to dagent.settings.VARIABLES"):
        settings.read("DAGENT_NOPE", {})


def test_each_server_reads_its_settings_once_into_a_record():
    white = WhiteboxServerSettings.from_env(
        {"DAGENT_MAX_EPISODES": "8", "DAGENT_COMMAND_TIMEOUT_S": "2.5", "DAGENT_TOOLS": "bash", "DAGENT_SANDBOX": "e2b"}
    )
    assert (white.max_episodes, white.command_timeout_s, white.tools, white.sandbox, white.max_steps) == (
        8,
        2.5,
        "bash",
        "e2b",
        None,
    )
    assert WhiteboxServerSettings.from_env({}) == WhiteboxServerSettings()
    with pytest.raises(ConfigError, match="DAGENT_MAX_EPISODES='many' is not a whole number"):
        WhiteboxServerSettings.from_env({"DAGENT_MAX_EPISODES": "many"})
    black = BlackboxServerSettings.from_env(
        {"DAGENT_ENGINE_URL": "http://e:1/v1", "DAGENT_STEPS": "9", "DAGENT_PRESET": "cpu", "SPACE_HOST": "me.hf.space"}
    )
    assert (black.engine_url, black.model, black.steps, black.preset, black.max_rollouts, black.space_host) == (
        "http://e:1/v1",
        None,
        9,
        "cpu",
        16,
        "me.hf.space",
    )
    with pytest.raises(ConfigError, match="DAGENT_ENGINE_URL is not set"):
        BlackboxServerSettings.from_env({})
    assert settings.listen({"PORT": "7860"}) == {"host": "0.0.0.0", "port": 7860, "log_level": "info"}
