"""The Python examples in the README and the docs run, as written, in a fresh process: an example
that rots fails here. A block whose first line is `# not run: WHY` is a sketch (it names what it
would need) and is skipped with that reason. Every page the site's nav (mkdocs.yml) leads a reader
to holds at least one example that runs."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "# not run:"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


def nav_pages(nav: Any) -> list[str]:
    """The pages of an mkdocs nav, in order: `- Title: page.md` items, bare pages and nested sections."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []  # an external link is no page of ours
    if isinstance(nav, Mapping):
        return [page for value in nav.values() for page in nav_pages(value)]
    if isinstance(nav, Sequence):
        return [page for item in nav for page in nav_pages(item)]
    return []


def pages_without_example(pages: Sequence[str], texts: Mapping[str, str]) -> list[str]:
    """The pages among `pages` with no ```python block that runs (a `# not run:` sketch does not count)."""
    return [
        page for page in pages if not any(not code.startswith(NOT_RUN) for code in python_blocks(texts.get(page, "")))
    ]


BLOCKS = [
    (page.relative_to(ROOT).as_posix(), i, code)
    for page in PAGES
    for i, code in enumerate(python_blocks(page.read_text()))
]


def test_the_readme_holds_an_example_of_each_loop_and_every_block_is_found():
    readme = [code for page, _, code in BLOCKS if page == "README.md"]
    assert len(readme) == 2 and "white_box_env" in readme[0] and "build_sync_trainer" in readme[1]
    assert python_blocks("x\n```python\nprint(1)\n```\n```bash\nls\n```\n") == ["print(1)\n"]


def test_every_page_in_the_nav_has_a_runnable_example():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert len(nav) >= 15 and "index.md" in nav, nav
    texts = {page: (ROOT / "docs" / page).read_text() for page in nav}
    missing = pages_without_example(nav, texts)
    assert not missing, f"docs pages in mkdocs.yml's nav without a runnable ```python example: {missing}"


def test_a_page_without_a_runnable_example_is_named():
    """Planted: a page with no python block and a page whose only block is a `# not run:` sketch are
    both named; a page with one runnable block among sketches is not; nested nav sections are read."""
    texts = {
        "ok.md": f"intro\n```python\n{NOT_RUN} needs a GPU\nx = 1\n```\n```python\nassert 1 + 1 == 2\n```\n",
        "none.md": "# No example\n\n```bash\nls\n```\n",
        "sketch.md": f"```python\n{NOT_RUN} it needs a server\nclient.call()\n```\n",
    }
    nav = nav_pages([{"Home": "ok.md"}, {"Section": [{"None": "none.md"}, "sketch.md"]}, {"Out": "https://x.org"}])
    assert nav == ["ok.md", "none.md", "sketch.md"]
    assert pages_without_example(nav, texts) == ["none.md", "sketch.md"]
    assert pages_without_example(["gone.md"], texts) == ["gone.md"]  # a page with no text has no example either


@pytest.mark.slow
@pytest.mark.parametrize("page, index, code", BLOCKS, ids=[f"{p}#{i}" for p, i, _ in BLOCKS])
def test_the_python_examples_run_as_written(page, index, code, tmp_path):
    if code.startswith(NOT_RUN):
        pytest.skip(code.splitlines()[0].removeprefix(NOT_RUN).strip())
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"{page}, python block {index}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
