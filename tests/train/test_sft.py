"""SFT warm start: real demonstrations, token rows exactly as GRPO holds them, a real SFTTrainer.

The model is `dagent.engine.models.tiny_qwen3()`: random weights over the REAL Qwen3 tokenizer and
chat template, so the rendering, the training template TRL swaps in, and the masks are the real
ones. The suite is built here: its reference programs print their gold (the shared demo suite's
print 42, so it serves as the suite where nothing can be demonstrated).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dagent.errors import ConfigError
from dagent.grading.dispatch import grade
from dagent.sandbox.base import Resources
from dagent.tools import TERMINATOR, select
from dagent.tools.episode import EpisodeConfig, reword_submission
from dagent.train.sft import (
    DemonstrationError,
    build_demonstrations,
    demonstration,
    sft_trainer,
    tokenize_demonstration,
    tool_suffix_ids,
    trainer_chat_template,
)
from tests.factories import TABLE, make_task

CSV = "/workdir/input/t.csv"
ROWS = f"rows = [l.split(',') for l in open('{CSV}').read().split()[1:]]\n"
TOOLS = select("bash")  # bash + submit_solution: the shortest prompt (the smoke trains on it)


def _tasks(split: str) -> list:
    k = {"train": 0, "test": 100, "eval": 200}[split]
    correct = [
        make_task(
            k,
            gold="3",
            instruction=f"[{split}] How many data rows does {CSV} have? Write only the value to /workdir/answer.txt.",
            solution=ROWS + "print(len(rows))",
        ),
        make_task(
            k + 1,
            gold="yes",
            answer_type="bool",
            instruction=f"[{split}] Is the largest b equal to 6? "
            "Answer yes or no. Write only the value to /workdir/answer.txt.",
            solution=ROWS + "print('yes' if max(int(r[1]) for r in rows) == 6 else 'no')",
        ),
        make_task(
            k + 2,
            level=2,
            gold="12",
            instruction=f"[{split}] What is the sum of column b in {CSV}? Submit just the number.",
            solution=ROWS + "print(sum(int(r[1]) for r in rows))",
        ),
    ]
    if split != "train":
        return correct[:1]
    return correct + [
        # its program prints something else than the gold (F16): no demonstration
        make_task(
            k + 3,
            gold="3",
            instruction=f"[{split}] How many columns? Write only the value to /workdir/answer.txt.",
            solution="print(42)",
        ),
        # prints the answer and then 5,000 characters: the clipped output is not the answer
        make_task(
            k + 4,
            gold="6",
            instruction=f"[{split}] The largest b? Write only the value to /workdir/answer.txt.",
            solution="print(6)\nprint('x' * 5000)",
        ),
    ]


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagent.suites.sources import load_tasks

    root = tmp_path_factory.mktemp("sft-suite")
    (root / "data").mkdir()
    (root / "tables" / "demo").mkdir(parents=True)
    (root / "tables" / "demo" / "t.csv").write_text(TABLE)
    for split in ("train", "test", "eval"):
        pq.write_table(
            pa.Table.from_pylist([t.to_row() for t in _tasks(split)]), root / "data" / f"{split}-00000-of-00001.parquet"
        )
    return load_tasks(root)


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("trl")
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3

    return AutoTokenizer.from_pretrained(tiny_qwen3())


@pytest.fixture(scope="module")
def rows(tiny_suite, backend, tokenizer):
    return build_demonstrations(tiny_suite, "train", n=10, backend=backend, tokenizer=tokenizer, tools=TOOLS)


def _staged(suite, backend, task):
    sandbox = backend.create(Resources(cpus=1, memory_mb=1024))
    sandbox.stage(suite.files_for(task))
    return sandbox


def _demo(suite, backend, index: int, config: EpisodeConfig = EpisodeConfig(tools=TOOLS)) -> list[dict]:
    task = suite.tasks("train")[index]
    sandbox = _staged(suite, backend, task)
    try:
        return demonstration(task, sandbox, config)
    finally:
        sandbox.close()


def _spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    spans, current = [], []
    for token, bit in zip(ids, mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


# ------------------------------------------------------------------ demonstrations


def test_a_demonstration_is_the_episode_training_runs_with_real_results(tiny_suite, backend):
    from dagent.envs.whitebox_runtime import white_box_env

    messages = _demo(tiny_suite, backend, 0)
    task = tiny_suite.tasks("train")[0]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # the user message is exactly what the TRL environment's reset() returns for this row
    env = white_box_env(tiny_suite, "bash", backend=backend)()
    try:
        assert messages[0]["content"] == env.reset(split="train", index=0) == reword_submission(task.instruction)
    finally:
        env._release()
    run, submit = messages[1]["tool_calls"][0]["function"], messages[3]["tool_calls"][0]["function"]
    assert run["name"] == "bash" and task.solution.strip() in run["arguments"]["command"]
    assert messages[2] == {"role": "tool", "name": "bash", "content": "3"}  # what the program printed, for real
    assert submit == {"name": TERMINATOR, "arguments": {"answer": "3"}}
    assert grade(task, submit["arguments"]["answer"]).correct is True
    assert messages[4]["name"] == TERMINATOR and messages[4]["content"].startswith("Answer submitted.")
    assert "tool_calls" not in messages[5] and messages[5]["content"]


def test_only_tasks_whose_printed_value_grades_correct_become_rows(tiny_suite, backend, rows):
    assert sorted(r["task_id"] for r in rows) == ["demo.t0", "demo.t1", "demo.t2"]
    with pytest.raises(DemonstrationError, match="printed '42'"):
        _demo(tiny_suite, backend, 3)
    with pytest.raises(DemonstrationError, match="does not grade correct"):  # 5,000 characters, clipped
        _demo(tiny_suite, backend, 4)
    # the tool result is clipped to the episode's output_chars, as in training: "yes" at 2 characters
    with pytest.raises(DemonstrationError, match="characters cut"):
        _demo(tiny_suite, backend, 1, EpisodeConfig(tools=TOOLS, output_chars=2))


def test_n_bounds_the_rows(tiny_suite, backend, tokenizer):
    one = build_demonstrations(tiny_suite, "train", n=1, backend=backend, tokenizer=tokenizer, tools=TOOLS)
    assert len(one) == 1


def test_a_suite_whose_programs_disagree_with_gold_gives_no_rows(suite, backend, tokenizer):
    # the shared demo suite's reference programs print 42 while the golds are 3, 12, 3, yes
    with pytest.raises(ConfigError, match="no demonstration"):
        build_demonstrations(suite, "train", n=4, backend=backend, tokenizer=tokenizer, tools=TOOLS)


@pytest.mark.parametrize("split", ["test", "eval", "test:easy", "eval:hard"])
def test_held_out_splits_are_refused(tiny_suite, backend, tokenizer, split):
    with pytest.raises(ConfigError, match="train split only"):
        build_demonstrations(tiny_suite, split, n=1, backend=backend, tokenizer=tokenizer, tools=TOOLS)


# ------------------------------------------------------------------ tokens and mask


def test_mask_covers_exactly_the_assistant_turns(tiny_suite, backend, tokenizer):
    messages = _demo(tiny_suite, backend, 0)
    template = trainer_chat_template(tokenizer)
    assert template is not None and "{%- generation %}" in template  # Qwen3's own drops history <think>
    row = tokenize_demonstration(messages, tokenizer, TOOLS, chat_template=template)
    ids, mask = row["input_ids"], row["completion_mask"]

    # the masked-in spans decode to exactly the assistant turns, tool-call JSON included, each
    # through its <|im_end|> (where generation stops) and without the template's newline after it
    def call(m):
        f = m["tool_calls"][0]["function"]
        body = json.dumps({"name": f["name"], "arguments": f["arguments"]}, ensure_ascii=False)
        return f"<think>\n\n</think>\n\n<tool_call>\n{body}\n</tool_call><|im_end|>"

    expected = [call(messages[1]), call(messages[3]), f"<think>\n\n</think>\n\n{messages[5]['content']}<|im_end|>"]
    assert [tokenizer.decode(s) for s in _spans(ids, mask)] == expected

    # nothing of the prompt or the tool results is in the loss; all of it is in the sequence
    outside = tokenizer.decode([t for t, b in zip(ids, mask, strict=True) if not b])
    for text in (
        messages[0]["content"],
        "<tool_response>\n3\n</tool_response>",
        messages[4]["content"],
        '"name": "bash"',
        "<|im_start|>assistant\n",
    ):
        assert text in outside
    inside = tokenizer.decode([t for t, b in zip(ids, mask, strict=True) if b])
    assert "tool_response" not in inside and messages[4]["content"] not in inside

    # the ids are the template's own rendering of the conversation (up to the last <|im_end|>),
    # and the mask is its {% generation %} mask less the newline after each <|im_end|>
    out = tokenizer.apply_chat_template(
        messages,
        tools=_schemas(),
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert out["input_ids"][: len(ids)] == ids and len(out["input_ids"]) == len(ids) + 1
    newline = tokenizer.encode("\n", add_special_tokens=False)
    generation = out["assistant_masks"]
    for k in range(1, len(ids) + 1):
        if generation[k] and ids[k - 1] == tokenizer.eos_token_id and out["input_ids"][k : k + 1] == newline:
            generation[k] = 0
    assert generation[: len(ids)] == mask and generation[len(ids)] == 0


def _schemas():
    from dagent.harness.toolloop import tool_schemas

    return tool_schemas(TOOLS)


def test_tool_suffix_is_the_one_grpo_trainer_appends(tokenizer):
    from trl import GRPOTrainer

    template = trainer_chat_template(tokenizer)
    tool_messages = [{"role": "tool", "name": "bash", "content": "3"}]
    # TRL 1.16's own method, on a stand-in holding only the attributes it reads
    fake = SimpleNamespace(
        processing_class=tokenizer, _tokenizer=tokenizer, chat_template=template, chat_template_kwargs={}, _is_vlm=False
    )
    assert tool_suffix_ids(tokenizer, tool_messages, chat_template=template) == GRPOTrainer._get_tool_suffix_ids(
        fake, tool_messages
    )


def test_a_template_that_cannot_render_tools_is_refused(tokenizer):
    import copy

    content_only = copy.copy(tokenizer)
    content_only.chat_template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
        "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    with pytest.raises(ConfigError, match="cannot render a tool-calling conversation"):
        trainer_chat_template(content_only)


# ------------------------------------------------------------------ the trainer


def _model():
    import torch
    from transformers import AutoModelForCausalLM

    from dagent.engine.models import tiny_qwen3

    return AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)


def test_the_loss_covers_only_the_masked_tokens(rows, tokenizer, tmp_path):
    import torch

    from dagent.engine.models import native_half_precision

    trainer = sft_trainer(_model(), tokenizer, rows, output_dir=tmp_path, max_steps=1, batch_size=1)
    args = trainer.args
    assert args.completion_only_loss is True and args.max_length is None and args.save_only_model is False
    assert args.use_cpu is True and args.bf16 == native_half_precision(torch.bfloat16)
    labels = trainer.train_dataset["labels"]
    for row, label in zip(rows, labels, strict=True):
        assert label == [t if b else -100 for t, b in zip(row["input_ids"], row["completion_mask"], strict=True)]


@pytest.mark.slow
def test_five_sft_steps_change_the_weights_and_checkpoint_the_optimizer(rows, tokenizer, tmp_path):
    import torch

    model = _model()
    weight = model.model.layers[0].self_attn.q_proj.weight
    before = weight.detach().clone()
    trainer = sft_trainer(
        model, tokenizer, rows[:1], output_dir=tmp_path, max_steps=5, batch_size=1, save_steps=5, learning_rate=1e-3
    )
    trainer.train()
    checkpoint = Path(tmp_path) / "checkpoint-5"
    assert (checkpoint / "optimizer.pt").is_file() and (checkpoint / "model.safetensors").is_file()
    assert not torch.equal(weight.detach(), before)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 5 and losses[-1] < losses[0]  # one demonstration, five steps: it is learned
