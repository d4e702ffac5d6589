"""The Python examples in the README and the docs run, as written, in a fresh process: an example
that rots fails here. A block whose first line is `# not run: WHY` is a sketch (it names what it
would need) and is skipped with that reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


BLOCKS = [
    (page.relative_to(ROOT).as_posix(), i, code)
    for page in PAGES
    for i, code in enumerate(python_blocks(page.read_text()))
]


def test_the_readme_holds_an_example_of_each_loop_and_every_block_is_found():
    readme = [code for page, _, code in BLOCKS if page == "README.md"]
    assert len(readme) == 2 and "white_box_env" in readme[0] and "build_sync_trainer" in readme[1]
    assert python_blocks("x\n```python\nprint(1)\n```\n```bash\nls\n```\n") == ["print(1)\n"]


@pytest.mark.slow
@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_the_python_examples_run_as_written(page, index, code, tmp_path):
    if code.startswith("# not run:"):
        pytest.skip(code.splitlines()[0].removeprefix("# not run:").strip())
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"{page}, python block {index}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
