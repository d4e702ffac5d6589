"""The Gradio demo: step through one task by hand and see what the trainer would see (also the
Space entry point: `python app.py`, port $PORT or 7860).

Four tabs over one live white-box episode per browser tab (`dagent.demo.session.Demo`):
- Task: pick a suite (the bundled build, a Hub dataset id or a path), a split and tier, search by
  id or words; read the instruction as each loop hands it to the agent; preview every staged table.
- Act by hand: any tool of the registry with its real arguments, output exactly as the model gets
  it, the step count against the budget; submit and see the grade, the rule and the reward.
- Let a model act: one step or a whole episode with the local engine (or an engine URL) through
  capture: the conversation, the token chain with its loss mask and logprobs, every call's role
  and link, the trainability verdict; save it as a recording.
- Replay: a recording (records.jsonl + traces/) or any evaluation's records, in the same views.

This file is a shell: what is shown comes from the pure `dagent.demo.views` helpers. (No
`from __future__ import annotations` here: gradio injects `gr.Request` by its evaluated annotation.)
"""

import functools
import os
import threading
import time
from pathlib import Path

from dagent import settings
from dagent.demo import views
from dagent.demo.session import MODELS, Demo, DemoError, default_model, local_model, model_note
from dagent.errors import DagentError
from dagent.grading.value import Grade
from dagent.tools import TERMINATOR

TIERS = ("any", "easy", "medium", "hard")
RECORDINGS_ENV = "DAGENT_DEMO_RECORDINGS"  # where "Save recording" writes (default: the cache)


def recordings_dir() -> Path:
    from dagent.settings import cache_dir

    return Path(settings.read(RECORDINGS_ENV) or cache_dir() / "demo-recordings")


def _friendly(outputs: int, at: int):
    """A handler whose known failures reach the person as a message in output `at` (of
    `outputs`), every other output left as it was: the tab keeps its state and goes on working."""
    import gradio as gr

    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (DemoError, DagentError) as e:
                out = [gr.skip()] * outputs
                out[at] = f"**Error:** {e}"
                return tuple(out) if outputs > 1 else out[0]

        return wrapped

    return decorate


def build_app(suite=None, backend=None, *, demo_state: Demo | None = None, reap_every_s: float = 60.0):
    import gradio as gr

    if demo_state is None:
        load = None
        if suite is None:
            from dagent.cli.common import load_suite

            load = load_suite  # the bundled build, built on first use as the CLI does
        demo_state = Demo(backend, suite=suite, load=load)
    state = demo_state
    # the suite given, else $DAGENT_SUITE, else the bundled build (what the suite box starts with)
    first = state.suite(None if suite is not None else settings.read("DAGENT_SUITE"))
    bases = list(first.bases)
    hand_tools = [t for t in state.config.tools if t != TERMINATOR]

    def reaper():
        while True:
            time.sleep(reap_every_s)
            state.reap()

    threading.Thread(target=reaper, name="demo-reaper", daemon=True).start()

    def steps(ep):
        return views.format_steps(ep.tool_calls, state.config.max_steps, ep.refused_calls, ep.done)

    # -- Task ---------------------------------------------------------------------------------
    @_friendly(2, 1)
    def find(source, split, tier, query):
        matches = views.format_matches(state.search(source, split, tier, query))
        note = f"{len(matches)} match(es)" + (" (the first 50)" if len(matches) >= 50 else "")
        return gr.update(choices=matches, value=matches[0][1] if matches else None), note

    @_friendly(12, 0)
    def load(source, split, ref, request: gr.Request):
        split, index = state.locate(source, split, ref)
        session = state.open(request.session_hash, source, split, index)
        instruction, reworded = state.instructions(request.session_hash)
        files = session.suite.files_for(session.task)
        previews = "\n\n".join(views.format_table_preview(name, path) for name, path in files.items())
        ep = session.episode
        status = f"loaded `{session.task.task_id}` in a fresh sandbox"
        if ep.start_cause:
            status += f" · **the sandbox did not start: {ep.start_cause}** (this episode can only be ungraded)"
        return (
            status,
            views.format_task(session.task.public(), split, index),
            views.format_instructions(instruction, reworded),
            previews,
            steps(ep),
            "",
            "",
            "",
            "",
            "",
            "",
            "",
        )

    # -- Act by hand --------------------------------------------------------------------------
    def pick_tool(name):
        return views.format_tool_doc(name), views.tool_template(name)

    @_friendly(3, 2)
    def run_tool(name, arguments, log, request: gr.Request):
        args = views.parse_tool_arguments(arguments)
        if isinstance(args, str):
            raise DemoError(args)
        result, step = state.call(request.session_hash, name, args)
        ep = state.get(request.session_hash).episode
        entry = views.format_call(name, args, result, step=step, budget=state.config.max_steps)
        return ((log + "\n\n" if log else "") + entry, steps(ep), "")

    @_friendly(2, 0)
    def submit(answer, reveal, request: gr.Request):
        grade: Grade = state.submit(request.session_hash, answer)
        session = state.get(request.session_hash)
        ep = session.episode
        md = views.format_grade(
            grade, session.task.gold if reveal else None, tool_calls=ep.tool_calls, reward_config=state.config.reward
        )
        return md, steps(ep)

    # -- Let a model act ----------------------------------------------------------------------
    def _model_views(key):
        session = state.get(key)
        run, ep = session.model, session.episode
        trajectory, findings, verdict = state.analysis(key)
        stop = f"stopped: **{run.stop}**" if run.over else "can go on: take another step"
        engine = f" · engine error: `{run.engine_note}`" if run.engine_note else ""
        status = (
            f"model `{run.model}` · seed {run.seed} · model calls {run.transcript.model_calls} · "
            f"completion budget {run.transcript.completion_tokens_used}/"
            f"{state.limits.max_completion_length} tokens · {stop}{engine}"
        )
        grade = ""
        if ep.grade is not None:
            grade = views.format_grade(ep.grade, tool_calls=ep.tool_calls, reward_config=state.config.reward)
        return (
            status,
            views.format_conversation(run.transcript.messages),
            views.format_token_chain(trajectory, run.decode),
            views.format_turns(trajectory),
            views.format_verdict(verdict, findings),
            grade,
            steps(ep),
        )

    def model_acts(whole: bool):
        """The handler of "One step" (whole=False) or "Whole episode"."""

        @_friendly(7, 0)
        def act(model, engine_url, request: gr.Request):
            state.model_step(request.session_hash, model, engine_url, whole=whole)
            return _model_views(request.session_hash)

        return act

    @_friendly(1, 0)
    def save(request: gr.Request):
        out = recordings_dir() / time.strftime("%Y%m%d")
        path = state.save(request.session_hash, out)
        return f"saved to `{path}`: open {out} in the Replay tab"

    # -- Replay -------------------------------------------------------------------------------
    recorded: dict[str, list] = {}

    @_friendly(7, 1)
    def open_recording(path, request: gr.Request):
        """Lists the recording's episodes and shows the first. It renders that episode itself
        rather than through the dropdown's change event: whether Gradio fires `change` on a
        programmatic update has varied between releases, and a chained event raced here."""
        from dagent.eval.recordings import load_recording

        if not (path or "").strip():
            raise DemoError("give a recording directory (or a records.jsonl)")
        items = load_recording(Path(path.strip()))
        recorded[request.session_hash] = items
        choices = [(f"{i}: {r.label}", str(i)) for i, r in enumerate(items)]
        first = choices[0][1] if choices else None
        return (gr.update(choices=choices, value=first), f"{len(items)} episode(s)", *_recorded_views(items, first))

    def _recorded_views(items, pick):
        from dagent.eval.recordings import read_trace
        from dagent.trajectory import analyse
        from dagent.trajectory.gate import gate

        if pick is None or not items:
            return "", "", "", "", ""
        item = items[int(pick)]
        record_md = views.format_record(item.record)
        if item.trace is None:
            return (
                record_md,
                "<i>no trace was recorded for this episode (an oracle or a run without capture)</i>",
                "",
                "",
                "",
            )
        trajectory = analyse(read_trace(item.trace))
        model = item.record.get("model")
        decode = state.engines.decoder(model, None) if local_model(model) else None
        chain = trajectory.chain_turns()
        messages = []
        if chain:
            last = chain[-1]
            messages = [*last.messages, last.metadata.get("response_message") or {}]
        return (
            record_md,
            views.format_conversation(messages),
            views.format_token_chain(trajectory, decode),
            views.format_turns(trajectory),
            views.format_verdict(gate(trajectory), trajectory.findings),
        )

    @_friendly(5, 0)
    def show_recorded(pick, request: gr.Request):
        return _recorded_views(recorded.get(request.session_hash) or [], pick)

    with gr.Blocks(title="dagent: step through a data-agent task") as demo:
        gr.Markdown(
            "# dagent · data-agent tasks on real tables\nLoad a task, act in its sandbox by hand or "
            "let a model act, and see what the trainer would see: the grade, the reward, the "
            "captured token chain and its loss mask."
        )
        with gr.Tab("Task"):
            with gr.Row():
                source = gr.Textbox(
                    value=(settings.read("DAGENT_SUITE") or "") if suite is None else "",
                    label="suite",
                    placeholder="empty: the bundled build; or a Hub dataset id / path",
                )
                split = gr.Dropdown(bases, value="test" if "test" in bases else bases[0], label="split")
                tier = gr.Dropdown(list(TIERS), value="any", label="tier")
            with gr.Row():
                query = gr.Textbox(label="search: a task id or words of the question", elem_id="query")
                find_btn = gr.Button("Find", elem_id="find")
            with gr.Row():
                matches = gr.Dropdown([], label="matches", allow_custom_value=True, elem_id="matches")
                load_btn = gr.Button("Load task", variant="primary", elem_id="load")
            status = gr.Markdown(elem_id="status")
            task_md = gr.Markdown(elem_id="task")
            with gr.Accordion("The instruction as each loop hands it to the agent", open=True):
                instr_md = gr.HTML(elem_id="instructions")
            with gr.Accordion("Staged tables (shape, dtypes, first rows)", open=True):
                preview_md = gr.Markdown(elem_id="previews")
        with gr.Tab("Act by hand"):
            steps_md = gr.Markdown(elem_id="steps")
            with gr.Row():
                tool = gr.Dropdown(hand_tools, value="bash", label="tool", elem_id="tool")
                run_btn = gr.Button("Run tool", elem_id="run")
            tool_doc = gr.Markdown(views.format_tool_doc("bash"))
            hand_msg = gr.Markdown(elem_id="hand-message")
            arguments = gr.Textbox(
                views.tool_template("bash"),
                label="arguments (JSON, the tool's parameters)",
                lines=3,
                elem_id="arguments",
            )
            terminal = gr.Textbox(
                label="what the model would get back",
                lines=16,
                max_lines=40,
                interactive=False,
                autoscroll=True,
                elem_id="terminal",
            )
            with gr.Row():
                answer = gr.Textbox(label=f"answer ({TERMINATOR})", elem_id="answer")
                reveal = gr.Checkbox(label="show gold after grading")
                submit_btn = gr.Button("Submit", variant="primary", elem_id="submit")
            grade_md = gr.Markdown(elem_id="grade")
        with gr.Tab("Let a model act"):
            with gr.Row():
                first = default_model()
                model = gr.Dropdown(
                    list(dict.fromkeys((first, *MODELS))),
                    value=first,
                    label="local engine model",
                    allow_custom_value=True,
                )
                engine_url = gr.Textbox(
                    label="or an OpenAI-compatible engine URL (vLLM)", placeholder="http://host:8000"
                )
            note = gr.Markdown(model_note(first), elem_id="model-note")
            model.change(model_note, [model], [note])
            with gr.Row():
                step_btn = gr.Button("One step", elem_id="model-step")
                episode_btn = gr.Button("Whole episode", elem_id="model-episode")
                save_btn = gr.Button("Save recording", elem_id="save")
            model_status = gr.Markdown(elem_id="model-status")
            model_grade = gr.Markdown(elem_id="model-grade")
            saved = gr.Markdown(elem_id="saved")
            with gr.Accordion("Conversation", open=True):
                conversation = gr.HTML(elem_id="conversation")
            with gr.Accordion("Token chain (what the trainer receives)", open=True):
                chain = gr.HTML(elem_id="chain")
            with gr.Accordion("Captured calls and roots", open=True):
                turns_md = gr.Markdown(elem_id="turns")
            verdict_md = gr.Markdown(elem_id="verdict")
        with gr.Tab("Replay"):
            with gr.Row():
                rec_path = gr.Textbox(
                    label="recording: a directory with records.jsonl (and traces/)",
                    value=str(recordings_dir()),
                    elem_id="rec-path",
                )
                rec_btn = gr.Button("Open", elem_id="rec-open")
            rec_pick = gr.Dropdown([], label="episode", elem_id="rec-pick")
            rec_count = gr.Markdown(elem_id="rec-count")
            rec_md = gr.Markdown(elem_id="rec-record")
            rec_conv = gr.HTML()
            rec_chain = gr.HTML(elem_id="rec-chain")
            rec_turns = gr.Markdown()
            rec_verdict = gr.Markdown(elem_id="rec-verdict")

        find_btn.click(find, [source, split, tier, query], [matches, status])
        query.submit(find, [source, split, tier, query], [matches, status])
        load_btn.click(
            load,
            [source, split, matches],
            [
                status,
                task_md,
                instr_md,
                preview_md,
                steps_md,
                terminal,
                grade_md,
                model_status,
                model_grade,
                conversation,
                chain,
                verdict_md,
            ],
        )
        tool.change(pick_tool, [tool], [tool_doc, arguments])
        run_btn.click(run_tool, [tool, arguments, terminal], [terminal, steps_md, hand_msg])
        submit_btn.click(submit, [answer, reveal], [grade_md, steps_md])
        model_outputs = [model_status, conversation, chain, turns_md, verdict_md, model_grade, steps_md]
        step_btn.click(model_acts(False), [model, engine_url], model_outputs)
        episode_btn.click(model_acts(True), [model, engine_url], model_outputs)
        save_btn.click(save, [], [saved])
        rec_views = [rec_md, rec_conv, rec_chain, rec_turns, rec_verdict]
        rec_btn.click(open_recording, [rec_path], [rec_pick, rec_count, *rec_views])
        rec_pick.input(show_recorded, [rec_pick], rec_views)  # a person's pick; opening renders its own

        def tab_closed(request: gr.Request):
            state.close(request.session_hash)
            recorded.pop(request.session_hash, None)

        demo.unload(tab_closed)
    demo.queue(default_concurrency_limit=8)
    demo.dagent = state  # the live state, for tests and shutdown
    return demo


def space_backend():
    """The sandbox backend a served demo uses (`DAGENT_SANDBOX`: local, e2b or hf), as the environment
    servers check theirs: a local one only once the isolation self-check holds on this host (no gold
    within a sandbox's reach), and any one only once a task's oracle runs in it (F51); else the start
    is refused with the fix named."""
    from dagent.cli.common import load_suite
    from dagent.harness.readiness import check_image
    from dagent.sandbox import get_backend
    from dagent.sandbox.isolation import require_isolation
    from dagent.sandbox.local import LocalBackend

    name = settings.read("DAGENT_SANDBOX") or "local"
    suite = load_suite(settings.read("DAGENT_SUITE"))  # the bundled build by default
    backend = get_backend(name) if name != "local" else LocalBackend()
    if not backend.remote:
        print(require_isolation(backend, suite_dir=suite.tables_root.parent).summary(), flush=True)
    print(f"sandbox runs the oracle of {check_image(suite, backend).task_id}", flush=True)
    return backend


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # nothing phones home from a Space or offline
    app = build_app(backend=space_backend())
    try:
        app.launch(server_name=settings.read("HOST"), server_port=int(settings.read("PORT", default="7860")))
    finally:
        app.dagent.shutdown()
