"""mypy over the typed rooms (pyproject.toml's [tool.mypy] `files`): the tree checks clean, and a
planted type error is caught under the same configuration (so a clean run means something)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_typed_rooms_check_clean():
    r = mypy()
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_a_planted_type_error_is_caught(tmp_path):
    planted = tmp_path / "reward.py"
    planted.write_text(
        (ROOT / "dagent/core/reward.py").read_text(encoding="utf-8") + '\nx: int = "planted"\n', encoding="utf-8"
    )
    r = mypy("--config-file", str(ROOT / "pyproject.toml"), str(planted))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "planted" in out or "Incompatible types in assignment" in out, out[-3000:]
