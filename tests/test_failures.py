import importlib
import re
from pathlib import Path

import pytest

from dagent.failures import FAILURE_MODES, failure_mode

ROOT = Path(__file__).resolve().parents[1]


def resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


def test_the_registry_is_f01_to_f61_in_order():
    assert list(FAILURE_MODES) == [f"F{i:02d}" for i in range(1, 62)]
    assert all(m.title and len(m.title) < 110 for m in FAILURE_MODES.values())


@pytest.mark.parametrize("code", [c for c, m in FAILURE_MODES.items() if m.detector and "/" not in m.detector])
def test_every_named_detector_exists(code):
    assert resolve(FAILURE_MODES[code].detector) is not None


def test_every_code_the_package_cites_is_registered():
    cited = {c for p in (ROOT / "dagent").rglob("*.py") for c in re.findall(r"\bF\d{2}\b", p.read_text())}
    assert cited and cited <= set(FAILURE_MODES)


def test_unknown_code_is_a_key_error_that_names_the_registry():
    with pytest.raises(KeyError, match="dagent/failures.py"):
        failure_mode("F99")


def test_the_marker_refuses_an_unregistered_code(pytester):
    pytester.makeconftest(
        (ROOT / "tests" / "conftest.py")
        .read_text()
        .replace("from tests.factories import write_suite\n", "")
        .replace('pytest_plugins = ["pytester"]\n', "")
    )
    pytester.makeini("[pytest]\nmarkers =\n    failure_mode(code): planted fault\n")
    pytester.makepyfile(
        test_planted='import pytest\n\n@pytest.mark.failure_mode("F99")\ndef test_x():\n    assert True\n'
    )
    result = pytester.runpytest_inprocess()
    assert result.ret not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)  # refused, not run
    result.stderr.fnmatch_lines(["*failure_mode markers name codes not in dagent/failures.py*", "*test_x*F99*"])
