"""The repository's one layout: `ruff check` (with the 120-column limit, E501) and `ruff format --check` pass,
as .ci/run runs them; each check is shown failing on a planted file, so neither passes for want of looking."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*RUFF, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_repository_passes_lint_and_format():
    lint = ruff("check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    layout = ruff("format", "--check", ".")
    assert layout.returncode == 0, "run `ruff format .`:\n" + layout.stdout + layout.stderr


def test_planted_long_line_and_unformatted_file_are_named(tmp_path):
    # the project's own settings, so the plant is judged by the rules CI uses
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "long.py").write_text(f"x = {'1 + ' * 40}1\n")  # 165 columns of code: ruff format wraps it
    (tmp_path / "text.py").write_text(f'X = "{"word " * 30}"\n')  # a string ruff format cannot wrap: only E501 sees it
    (tmp_path / "ugly.py").write_text("def f( a,b ):\n  return a+b\n")
    lint = ruff("check", "--select", "E501", "--output-format", "concise", ".", cwd=tmp_path)
    assert lint.returncode == 1 and "text.py:1:121: E501" in lint.stdout, lint.stdout
    layout = ruff("format", "--check", ".", cwd=tmp_path)
    assert layout.returncode == 1
    named = {line.split()[1].split(":")[0] for line in layout.stdout.splitlines() if line.lstrip().startswith("--> ")}
    assert named == {"long.py", "ugly.py"}, layout.stdout
