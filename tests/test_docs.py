"""The docs: docs/suite.md documents every column a suite row has (the Task model is the source); the
site builds strict; the README is a landing page with the picture."""

import re
from pathlib import Path

from dagent.core.task import TableSource, Task
from dagent.grading.dispatch import ANSWER_TYPES

DOC = (Path(__file__).resolve().parents[1] / "docs" / "suite.md").read_text()


def test_every_task_column_and_answer_type_is_documented():
    missing = [name for name in Task.model_fields if f"`{name}`" not in DOC]
    assert not missing, f"docs/suite.md lacks the columns {missing}"
    assert not [t for t in ANSWER_TYPES if f"`{t}`" not in DOC]
    assert not [n for n in TableSource.model_fields if f"`{n}`" not in DOC]


ROOT = Path(__file__).resolve().parents[1]


def mkdocs_build(config: Path, site: Path):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_docs_build_strict_and_a_broken_link_fails_the_build(tmp_path):
    """docs/ builds with mkdocs in strict mode (every page in the nav, every link between pages and
    every anchor resolves); the same build with one planted broken link fails, naming it."""
    import shutil

    r = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "concepts.md"
    text = page.read_text()
    for n, planted in enumerate(["See [a page](gone.md).", "See [the results](results.md#no-such-section)."]):
        page.write_text(f"{text}\n{planted}\n")
        r = mkdocs_build(copy / "mkdocs.yml", tmp_path / f"site{n}")
        wanted = "gone.md" if n == 0 else "no-such-section"
        assert r.returncode != 0 and wanted in r.stderr, r.stderr[-3000:]


def test_every_docs_page_is_in_the_nav_and_linked_from_the_index():
    import yaml

    nav = [next(iter(item.values())) for item in yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages
    index = (ROOT / "docs" / "index.md").read_text()
    assert [p for p in pages if p != "index.md" and f"]({p})" not in index] == []


def test_the_readme_is_a_landing_page_with_the_two_commands_and_the_picture():
    """80-120 lines: what it is, the two commands, the picture of the flow, an example of each loop,
    the learning table, where to go next."""
    import xml.etree.ElementTree as ET

    readme = (ROOT / "README.md").read_text()
    assert 80 <= len(readme.splitlines()) <= 120
    assert "environment_factory=white_box_env(" in readme and "build_sync_trainer(" in readme
    assert "bash scripts/setup.sh && .venv/bin/dagent eval --agent oracle --split test" in readme
    assert "bash scripts/setup.sh --tests && .venv/bin/python -m pytest" in readme
    assert "](docs/images/flow.svg)" in readme
    svg = ET.parse(ROOT / "docs" / "images" / "flow.svg").getroot()
    words = " ".join(t.text or "" for t in svg.iter() if t.tag.endswith("text"))
    assert all(
        step in words
        for step in (
            "task",
            "sandbox",
            "agent / engine",
            "capture",
            "trajectory",
            "grade",
            "reward",
            "trainer or report",
            "white-box",
            "black-box",
        )
    )
    linked = set(re.findall(r"\]\(docs/([a-z_]+\.md)", readme))
    assert {"index.md", "architecture.md", "concepts.md", "results.md"} <= linked


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text).strip("-")


def test_the_readmes_links_into_docs_reach_a_page_and_a_heading():
    """mkdocs checks the links between pages; the README's into docs/ are checked here."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert links
    for path, anchor in links:
        assert (ROOT / path).is_file(), path
        if anchor:
            headings = {slug(h) for h in re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)}
            assert anchor in headings, (path, anchor, sorted(headings))
    assert (
        slug("The black-box warm start: the harness's own format") == "the-black-box-warm-start-the-harnesss-own-format"
    )
