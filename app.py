"""The Gradio demo: step through a task by hand (also the Space entry point).

Pick a split and an index, read the instruction the agent would get, run shell commands in the
task's sandbox (tables staged at /workdir/input), then submit an answer and see the grade the
server computes with the full task. The UI is a shell over pure `format_*` helpers.
"""

from __future__ import annotations

import os
import threading
import uuid

from dagent.evaluation import settle
from dagent.grading import Grade
from dagent.sandbox.base import ExecResult, Resources, Sandbox
from dagent.task import PublicTask

OUTPUT_CLIP = 4000


def format_task(task: PublicTask, split: str, index: int) -> str:
    files = "\n".join(f"- `/workdir/input/{f.rsplit('/', 1)[-1]}`" for f in task.data_files)
    sources = "; ".join(f"{s.table_id} ({s.package}, {s.licence})" for s in task.sources)
    return (
        f"### {task.task_id}\n"
        f"**split** `{split}` #{index} · **tier** {task.difficulty_tier} (level {task.difficulty_level})"
        f" · **answer** {task.answer_type}\n\n{task.instruction}\n\n**files**\n{files}\n\n"
        f"<sub>sources: {sources}</sub>"
    )


def format_exec(command: str, result: ExecResult) -> str:
    def clip(text: str) -> str:
        return text if len(text) <= OUTPUT_CLIP else text[:OUTPUT_CLIP] + f"\n... [{len(text) - OUTPUT_CLIP} more characters]"

    status = "timed out" if result.timed_out else "out of memory" if result.oom_killed else f"exit {result.exit_code}"
    parts = [f"$ {command}", f"[{status}, {result.duration_s:.2f}s]"]
    if result.stdout:
        parts.append(clip(result.stdout))
    if result.stderr:
        parts.append("stderr:\n" + clip(result.stderr))
    return "\n".join(parts)


def format_grade(grade: Grade, gold: str | None = None) -> str:
    if grade.correct is None:
        head = f"**Ungraded** ({grade.note})"
    else:
        head = "**Correct**" if grade.correct else "**Wrong**"
    line = f"{head} · reward {grade.reward} · rule `{grade.method}`"
    if grade.note and grade.correct is not None:
        line += f" · {grade.note}"
    if gold is not None:
        line += f"\n\ngold: `{gold}`"
    return line


class Sessions:
    """Open sandboxes by session id (one per browser tab), behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[Sandbox, str, int]] = {}

    def start(self, sandbox: Sandbox, split: str, index: int) -> str:
        sid = uuid.uuid4().hex
        with self._lock:
            self._open[sid] = (sandbox, split, index)
        return sid

    def get(self, sid: str | None) -> tuple[Sandbox, str, int] | None:
        with self._lock:
            return self._open.get(sid or "")

    def close(self, sid: str | None) -> None:
        with self._lock:
            entry = self._open.pop(sid or "", None)
        if entry:
            entry[0].close()


def build_app(suite=None, backend=None):
    import gradio as gr

    from dagent.hub import load_tasks
    from dagent.sandbox.local import LocalBackend

    suite = suite or load_tasks(os.environ.get("DAGENT_SUITE") or None)
    backend = backend or LocalBackend()
    sessions = Sessions()

    def load(split: str, index: float, sid: str | None):
        sessions.close(sid)
        task = suite.task_at(split, int(index))
        sandbox = backend.create(Resources(cpus=task.cpus, memory_mb=task.memory_mb, timeout_s=60))
        sandbox.stage(suite.files_for(task))
        return format_task(task.public(), split, int(index)), "", "", sessions.start(sandbox, split, int(index))

    def run(command: str, log: str, sid: str | None):
        entry = sessions.get(sid)
        if entry is None:
            return log + "\n(load a task first)"
        result = entry[0].exec(command, timeout_s=60)
        return (log + "\n\n" if log else "") + format_exec(command, result)

    def submit(answer: str, reveal: bool, sid: str | None):
        entry = sessions.get(sid)
        if entry is None:
            return "(load a task first)"
        _, split, index = entry
        task = suite.task_at(split, index)
        return format_grade(settle(task, answer.encode()), task.gold if reveal else None)

    with gr.Blocks(title="dagent: step through a data-agent task") as demo:
        gr.Markdown("# dagent · data-agent tasks on real tables\nLoad a task, explore `/workdir/input` with shell commands, submit an answer.")
        sid = gr.State(None)
        with gr.Row():
            split = gr.Dropdown(suite.split_names(), value="test", label="split")
            index = gr.Number(value=0, precision=0, label="index")
            load_btn = gr.Button("Load task", variant="primary")
        task_md = gr.Markdown()
        command = gr.Textbox(label="command (bash, runs in /workdir)", value="ls -la /workdir/input && head -5 /workdir/input/*")
        run_btn = gr.Button("Run")
        log = gr.Code(label="terminal", language="shell")
        with gr.Row():
            answer = gr.Textbox(label="answer")
            reveal = gr.Checkbox(label="show gold after grading")
            submit_btn = gr.Button("Submit", variant="primary")
        grade_md = gr.Markdown()
        load_btn.click(load, [split, index, sid], [task_md, log, grade_md, sid])
        run_btn.click(run, [command, log, sid], [log])
        submit_btn.click(submit, [answer, reveal, sid], [grade_md])
    return demo


if __name__ == "__main__":
    build_app().launch(server_name=os.environ.get("HOST", "0.0.0.0"), server_port=int(os.environ.get("PORT", "7860")))
