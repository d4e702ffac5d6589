"""The demo in a real headless Chromium (playwright-python driving Debian's `chromium`): a person
loads a task, previews its table, runs a command and a file tool, lets the real tiny model take a
step through capture and reads the token chain with its mask, submits and sees the grade.

Screenshots of each stage go to build/screenshots/ (git-ignored). The model is the local engine's
tiny Qwen3 (random weights, the real Qwen3 tokenizer and template), started by the app itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `bash scripts/setup.sh --tests` installs it"),
]


@pytest.fixture(scope="module")
def app_url(suite, backend, tmp_path_factory):
    pytest.importorskip("playwright")
    mp = pytest.MonkeyPatch()
    mp.setenv("DAGENT_DEMO_RECORDINGS", str(tmp_path_factory.mktemp("recordings")))
    mp.setenv("DAGENT_DEMO_MODEL", "tiny-qwen3")  # fast to start; its text is noise (the default is a real model)
    from app import build_app
    from dagent.serving import free_port

    app = build_app(suite, backend)
    port = free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}", app.dagent
    app.close()
    app.dagent.shutdown()
    mp.undo()


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(app_url[0])
        page.locator("#find").wait_for()  # the app is rendered
        yield page
        browser.close()


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def tab(page, name):
    page.get_by_role("tab", name=name).click()


def text(page, elem_id):
    return page.locator(f"#{elem_id}").inner_text()


def wait_text(page, elem_id, needle):
    from playwright.sync_api import TimeoutError

    try:
        page.wait_for_function(
            "([id, needle]) => (document.getElementById(id)?.innerText || '').includes(needle)", arg=[elem_id, needle]
        )
    except TimeoutError:
        shot(page, f"timeout-{elem_id}")
        raise AssertionError(f"#{elem_id} never showed {needle!r}; it shows {text(page, elem_id)!r}") from None
    return text(page, elem_id)


def test_a_person_steps_through_a_task_and_sees_what_the_trainer_sees(page, app_url):
    _, state = app_url
    # pick a task by words, load it: the instruction both ways, the staged table previewed
    page.locator("#query textarea").fill("sum of column b")
    page.locator("#find").click()
    assert wait_text(page, "status", "match(es)").strip() == "1 match(es)"
    page.locator("#load").click()
    wait_text(page, "status", "loaded demo.t101")
    instructions = text(page, "instructions")
    assert "submit_solution" in instructions and "answer.txt" in instructions
    previews = text(page, "previews")
    assert "3 rows × 2 columns" in previews and "int64" in previews
    shot(page, "1-task")

    # act by hand: a command, then a file tool, each answered as the model would be
    tab(page, "Act by hand")
    page.locator("#arguments textarea").fill('{"command": "wc -l input/t.csv && head -2 input/t.csv"}')
    page.locator("#run").click()
    page.wait_for_function("() => document.querySelector('#terminal textarea').value.includes('4 input/t.csv')")
    page.locator("#tool input").click()
    page.get_by_role("option", name="read", exact=True).click()
    page.wait_for_function("() => document.querySelector('#arguments textarea').value.includes('offset')")
    page.locator("#arguments textarea").fill('{"path": "input/t.csv", "limit": 2}')
    page.locator("#run").click()
    page.wait_for_function("() => document.querySelector('#terminal textarea').value.includes('[2/30] read')")
    terminal = page.locator("#terminal textarea").input_value()
    assert "1\ta,b" in terminal and "pass offset=3 to read on" in terminal
    assert "**2**" in text(page, "steps") or "2 of 30" in text(page, "steps")
    page.locator("#arguments textarea").fill("{path: nope")  # bad input: a message, nothing run
    page.locator("#run").click()
    assert "not valid JSON" in wait_text(page, "hand-message", "Error")
    assert page.locator("#terminal textarea").input_value() == terminal
    shot(page, "2-by-hand")

    # submit by hand: the grade, the rule, the reward with its efficiency term
    page.locator("#answer textarea, #answer input").first.fill("12")
    page.locator("#submit").click()
    grade = wait_text(page, "grade", "Correct")
    assert "rule" in grade and "2 tool calls" in grade
    shot(page, "3-grade")

    # let the tiny model take a step through capture: the conversation, the token chain, the verdict
    tab(page, "Let a model act")
    page.locator("#model-step").click()
    wait_text(page, "model-status", "model calls 1")
    chain = page.locator("#chain")
    trained = chain.locator("[data-mask='1']").count()
    context = chain.locator("[data-mask='0']").count()
    assert trained > 0 and context > 0
    assert "logprob" in chain.locator("[data-mask='1']").first.get_attribute("title")
    assert "▶ turn 0" in chain.inner_text() and "trained (loss mask 1)" in chain.inner_text()
    assert "trainability" in text(page, "verdict") and "agent" in text(page, "turns")
    (key,) = state._sessions  # this page's one session
    (seq,) = state.analysis(key)[0].sequences()
    assert trained == seq.n_trainable  # the page shows exactly the trainer's mask
    shot(page, "4-model-step")

    # save the model's episode, open it in Replay: the same record, the same mask
    page.locator("#save").click()
    saved = wait_text(page, "saved", "saved to")
    tab(page, "Replay")
    page.locator("#rec-path textarea").fill(saved.split("open ")[-1].split(" in the Replay")[0].strip())
    page.locator("#rec-open").click()
    record = wait_text(page, "rec-record", "demo.t101")
    assert "WRONG" in record and "agent tools" in record and "model calls 1" in record
    page.wait_for_function("() => document.querySelectorAll(\"#rec-chain [data-mask='1']\").length > 0")
    assert page.locator("#rec-chain [data-mask='1']").count() == trained
    assert "trainability" in text(page, "rec-verdict")
    shot(page, "5-replay")

    # save the episode again; reopened, the list has both, and a person's pick shows the one picked
    records = Path(saved.split("saved to ")[-1].split(": open ")[0].strip())
    tab(page, "Let a model act")
    page.locator("#save").click()
    for _ in range(100):
        if len(records.read_text().splitlines()) == 2:
            break
        page.wait_for_timeout(100)
    first, second = (json.loads(line) for line in records.read_text().splitlines())
    assert f"{first['duration_s']:.1f}s" != f"{second['duration_s']:.1f}s"  # the two renderings differ
    tab(page, "Replay")
    page.locator("#rec-open").click()
    wait_text(page, "rec-count", "2 episode(s)")
    assert f"{first['duration_s']:.1f}s" in text(page, "rec-record")  # opening shows the first
    page.locator("#rec-pick input").click()
    page.get_by_role("option").nth(1).click()
    assert "demo.t101" in wait_text(page, "rec-record", f"{second['duration_s']:.1f}s")

    # bad input keeps the app working: an unknown task id gets a message
    tab(page, "Task")
    page.locator("#matches input").fill("no-such-task")
    page.locator("#matches input").press("Enter")
    page.locator("#load").click()
    assert "unknown task id 'no-such-task'" in wait_text(page, "status", "Error")
    shot(page, "6-bad-input")
    assert "demo.t101" in text(page, "task")  # what was loaded stays, and the app goes on working
    page.locator("#query textarea").fill("largest b")
    page.locator("#find").click()
    assert wait_text(page, "status", "match(es)").strip() == "0 match(es)"  # test split: no such task
