"""SFT warm start: oracle demonstrations, tokenised exactly as GRPO will see them, and TRL's SFTTrainer.

A small model makes no tool calls at all, so GRPO gets no gradient (measured: SmolLM2-135M-Instruct,
0 of 16 samples called a tool). A few steps of SFT on correct episodes fixes that. Invariants
(tests/train/test_sft.py):

- Demonstrations are REAL episodes. The conversation is the one `GRPOTrainer(environment_factory=
  white_box_env(...))` builds: one user message with the instruction exactly as `reset()` returns it
  (`reword_submission`, F28); an assistant `bash` call that runs the task's reference program (one
  call, a heredoc: the reward pays for fewer calls); the tool message with what that call printed,
  executed in a staged sandbox through `Episode.call` (the same validation, budget and clipping to
  `output_chars` as training); an assistant `submit_solution` call with that printed value; the
  episode's acknowledgement; a short final assistant message (the turn after which TRL's loop stops).
- Only episodes that grade correct become demonstrations: the printed value must grade correct with
  `dagent.grading.dispatch.grade` AND the episode's own grade must be correct; other tasks are skipped with
  the reason. Only the `train` split (any tier) is accepted: demonstrations of held-out tasks leak.
- Rows are token ids, never tool calls in a `datasets` table (which merges the argument structs
  across rows and teaches broken calls). A row's `input_ids` are the ids GRPOTrainer holds for that
  episode: the prompt rendered with the tool schemas and the generation prompt, then per assistant
  turn its tokens through the end-of-turn (eos) token, then the tool-result suffix built the way
  TRL's `GRPOTrainer._get_tool_suffix_ids` builds it, all under the template GRPOTrainer trains with
  (the tokenizer's own when prefix-preserving, else TRL's training variant: `trainer_chat_template`).
  The concatenation must equal the template's own rendering of the whole conversation (checked per
  row; a template for which it does not is refused).
- `completion_mask` is 1 exactly on the assistant-generated spans (what GRPO's `tool_mask` marks 1:
  the tokens after the generation prompt through eos, tool-call JSON included) and 0 on the prompt,
  the tool results and the template's scaffolding around them.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagent.core.suite import TaskSuite, parse_split
from dagent.core.task import Task
from dagent.engine.models import native_half_precision
from dagent.errors import ConfigError, SandboxError, TaskError
from dagent.grading.dispatch import grade
from dagent.harness.toolloop import tool_schemas
from dagent.sandbox.base import Resources, Sandbox, SandboxBackend
from dagent.tools import ALL_TOOLS, TERMINATOR, ToolResult, select
from dagent.tools.episode import Episode, EpisodeConfig
from dagent.train.trl_seams import TOOL_SUFFIX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase
    from trl import SFTTrainer

_LOG = logging.getLogger(__name__)

TRAIN_BASE = "train"


class DemonstrationError(TaskError):
    """A task gives no demonstration: its reference program failed, or what it printed does not
    grade correct (the suite's gold and its program disagree, F16)."""


# ------------------------------------------------------------------ the conversation


def heredoc(program: str) -> str:
    """A bash command line that runs `program` with python3 from a quoted heredoc (no expansion)."""
    body = program.rstrip("\n")
    tag = "PY"
    while tag in body.splitlines():
        tag += "_"
    return f"python3 - <<'{tag}'\n{body}\n{tag}"


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def _result(name: str, result: ToolResult) -> dict[str, Any]:
    return {"role": "tool", "name": name, "content": result.render()}  # as TRL appends it


def demonstration(task: Task, sandbox: Sandbox, config: EpisodeConfig) -> list[dict[str, Any]]:
    """The conversation of a correct episode on `task`, every tool result real (module docstring).

    `sandbox` must have the task's tables staged; it is released at the submission, as in training.
    Raises `DemonstrationError` when the reference program fails or its output does not grade
    correct, `ConfigError` when `config` serves no `bash`.
    """
    if "bash" not in config.tools:
        raise ConfigError(
            f"demonstrations run the reference program with bash, but the tools are {config.tools}: "
            "serve the bash toolset (tools=select('bash') or select())"
        )
    episode = Episode(uuid.uuid4().hex, task, split=TRAIN_BASE, index=-1, config=config, sandbox=sandbox)
    messages: list[dict[str, Any]] = [{"role": "user", "content": episode.instruction}]
    command = heredoc(task.solution)
    ran = episode.call("bash", {"command": command})
    messages += [_call("bash", {"command": command}), _result("bash", ran)]
    if not ran.ok:
        raise DemonstrationError(f"{task.task_id}: the reference program failed: {ran.render()[:300]}")
    answer = ran.output.strip()
    checked = grade(task, answer)
    if checked.correct is not True:
        raise DemonstrationError(
            f"{task.task_id}: the reference program printed {answer[:80]!r} "
            f"({len(answer):,} characters as the model sees them), which does not grade "
            f"correct against gold {task.gold[:80]!r} ({checked.method}: {checked.note})"
        )
    ack = episode.call(TERMINATOR, {"answer": answer})
    if not ack.ok or episode.grade is None or episode.grade.correct is not True:
        note = episode.grade.note if episode.grade is not None else ack.render()
        raise DemonstrationError(f"{task.task_id}: the episode did not grade the submission correct ({note})")
    messages += [
        _call(TERMINATOR, {"answer": answer}),
        _result(TERMINATOR, ack),
        {"role": "assistant", "content": f"I submitted {answer}."},
    ]
    return messages


# ------------------------------------------------------------------ the template GRPO trains with


def trainer_chat_template(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The template GRPOTrainer renders with when it has tools: None (the tokenizer's own) when that
    is prefix-preserving, else TRL's training variant (`get_training_chat_template`), exactly as
    `GRPOTrainer.__init__` decides. ConfigError when the template cannot render tools."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    if not supports_tool_calling(tokenizer):
        raise ConfigError(
            "the tokenizer's chat template cannot render a tool-calling conversation (TRL's supports_tool_calling "
            "is False: it drops the tool calls or the tool results), so neither SFT nor GRPO can train tool use "
            "with it: give the model directory a tool-calling template (SmolLM2's own renders only `content`; "
            "TRL's trl/chat_templates/qwen2_5.jinja works with TRL's response parser)"
        )
    if is_chat_template_prefix_preserving(tokenizer):
        return None
    try:
        return get_training_chat_template(tokenizer)
    except ValueError as e:
        raise ConfigError(
            f"the chat template is not prefix-preserving and TRL has no training variant of it ({e}): "
            "use a prefix-preserving tool-calling template (one of TRL's *_training.jinja)"
        ) from e


MIRRORS = TOOL_SUFFIX  # tool_suffix_ids mirrors this TRL seam (not called: dagent.train.trl_seams guards the release)


def tool_suffix_ids(
    tokenizer: PreTrainedTokenizerBase,
    tool_messages: Sequence[Mapping[str, Any]],
    *,
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """The ids GRPOTrainer appends after an assistant turn's eos for its tool results (the same
    dummy conversation as TRL 1.16's `GRPOTrainer._get_tool_suffix_ids`, a seam: `TOOL_SUFFIX`)."""
    kwargs = dict(chat_template_kwargs or {})
    dummy = [
        {"role": "user", "content": "dummy"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}],
        },
    ]
    prefix = _ids(
        tokenizer.apply_chat_template(
            dummy, add_generation_prompt=False, tokenize=True, chat_template=chat_template, return_dict=False, **kwargs
        )
    )
    full = _ids(
        tokenizer.apply_chat_template(
            dummy + list(tool_messages),
            add_generation_prompt=True,
            tokenize=True,
            chat_template=chat_template,
            return_dict=False,
            **kwargs,
        )
    )
    eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
    if eos:
        prefix = prefix[: eos[-1] + 1]
    if full[: len(prefix)] != prefix:
        raise ConfigError(
            "the chat template renders an assistant turn differently once tool results follow it "
            "(not prefix-preserving): use TRL's training variant of the template"
        )
    return full[len(prefix) :]


def _ids(out: Any) -> list[int]:
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    if ids and isinstance(ids[0], list):  # a batch of one
        ids = ids[0]
    return [int(t) for t in ids]


def tokenize_demonstration(
    messages: Sequence[Mapping[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    tools: Sequence[str] = select(),
    *,
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, list[int]]:
    """`input_ids` and `completion_mask` of one conversation, as GRPOTrainer would hold them.

    `chat_template` is the template to render with (`trainer_chat_template(tokenizer)`; None: the
    tokenizer's own), `chat_template_kwargs` must be GRPOConfig's.
    """
    schemas = tool_schemas(tuple(tools))
    kwargs = dict(chat_template_kwargs or {})
    eos = tokenizer.eos_token_id

    def render(msgs: Sequence[Mapping[str, Any]], generation_prompt: bool) -> list[int]:
        return _ids(
            tokenizer.apply_chat_template(
                list(msgs),
                tools=schemas,
                chat_template=chat_template,
                add_generation_prompt=generation_prompt,
                tokenize=True,
                return_dict=False,
                **kwargs,
            )
        )

    if not messages or messages[0].get("role") != "user":
        raise ConfigError("a demonstration starts with the user message that reset() returns")
    ids = render(messages[:1], True)
    mask = [0] * len(ids)
    i = 1
    while i < len(messages):
        role = messages[i].get("role")
        if role == "assistant":
            before = render(messages[:i], True)
            if before != ids:
                raise ConfigError(
                    "the chat template's rendering of the conversation so far differs from the ids "
                    "GRPOTrainer concatenates (prompt + completions + tool suffixes): it is not "
                    "prefix-preserving; use TRL's training variant (trainer_chat_template)"
                )
            after = render(messages[: i + 1], False)
            span = after[len(before) :]
            if after[: len(before)] != before or eos not in span:
                raise ConfigError(
                    "the chat template does not render an assistant turn as the generation prompt "
                    f"followed by the turn through eos ({tokenizer.eos_token!r}): it cannot be "
                    "trained the way GRPOTrainer generates"
                )
            span = span[: len(span) - span[::-1].index(eos)]  # through the last eos: where generation stops
            ids, mask = ids + span, mask + [1] * len(span)
            i += 1
        elif role == "tool":
            j = i
            while j < len(messages) and messages[j].get("role") == "tool":
                j += 1
            suffix = tool_suffix_ids(tokenizer, messages[i:j], chat_template=chat_template, chat_template_kwargs=kwargs)
            ids, mask = ids + suffix, mask + [0] * len(suffix)
            i = j
        else:
            raise ConfigError(
                f"message {i} has role {role!r}: a demonstration holds one user message, then "
                "assistant turns and tool results only (what GRPOTrainer builds)"
            )
    full = render(messages, False)
    if full[: len(ids)] != ids or eos in full[len(ids) :]:
        raise ConfigError(
            "the concatenated ids differ from the chat template's rendering of the whole "
            "conversation: the template is not prefix-preserving"
        )
    return {"input_ids": ids, "completion_mask": mask}


# ------------------------------------------------------------------ building the rows


def build_demonstrations(
    suite: TaskSuite,
    split: str = "train:easy",
    *,
    n: int,
    backend: SandboxBackend,
    tokenizer: PreTrainedTokenizerBase,
    tools: Sequence[str] = select(),
    config: EpisodeConfig | None = None,
    seed: int = 0,
    max_length: int | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Up to `n` pre-tokenised demonstrations from `split` (train only), tasks in a seeded order.

    Rows: `input_ids`, `completion_mask`, and `task_id`/`index` (which task, for the record).
    `tools` are the tool NAMES the GRPO run serves (`select(...)`); `config` its episode settings
    (its `tools` are replaced by `tools`). Tasks whose reference program does not grade correct, or
    whose row exceeds `max_length` tokens, are skipped and logged; no row at all is a ConfigError.
    """
    name = parse_split(split, suite.bases)
    if name.base != TRAIN_BASE:
        raise ConfigError(
            f"demonstrations come from the train split only, got {split!r}: demonstrations of "
            "held-out tasks would leak their answers into the policy; use train or train:<tier>"
        )
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    tools = tuple(tools)
    unknown = [t for t in tools if t not in ALL_TOOLS]
    if unknown or TERMINATOR not in tools:
        raise ConfigError(f"tools must be tool names as select() returns them (with {TERMINATOR}), got {tools}")
    episode_config = dataclasses.replace(config or EpisodeConfig(), tools=tools)
    template = trainer_chat_template(tokenizer)
    tasks = suite.tasks(split)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for index in order:
        if len(rows) >= n:
            break
        task = tasks[index]
        try:
            sandbox = backend.create(
                Resources(cpus=task.cpus, memory_mb=task.memory_mb, timeout_s=episode_config.command_timeout_s)
            )
        except (SandboxError, OSError) as e:
            skipped[task.task_id] = f"sandbox_unavailable: {e}"
            continue
        try:
            sandbox.stage(suite.files_for(task))
            messages = demonstration(task, sandbox, episode_config)
        except (DemonstrationError, SandboxError, OSError) as e:
            skipped[task.task_id] = str(e)
            continue
        finally:
            sandbox.close()
        row = tokenize_demonstration(
            messages, tokenizer, tools, chat_template=template, chat_template_kwargs=chat_template_kwargs
        )
        if max_length is not None and len(row["input_ids"]) > max_length:
            skipped[task.task_id] = f"{len(row['input_ids'])} tokens > max_length {max_length}"
            continue
        rows.append({**row, "task_id": task.task_id, "index": index})
    if skipped:
        first = "; ".join(f"{k}: {v}" for k, v in list(skipped.items())[:3])
        _LOG.warning(
            "skipped %d of %d tasks tried in %s (%s%s)",
            len(skipped),
            len(rows) + len(skipped),
            split,
            first,
            "; ..." if len(skipped) > 3 else "",
        )
    if not rows:
        raise ConfigError(
            f"no demonstration could be built from {split!r} ({len(skipped)} tasks skipped, e.g. "
            f"{next(iter(skipped.values()), 'the split is empty')}): check the suite's reference "
            "programs against their gold (`dagent eval --agent oracle`)"
        )
    if len(rows) < n:
        _LOG.warning(
            "built %d demonstrations, fewer than the %d asked for: %s has no more usable tasks", len(rows), n, split
        )
    return rows


# ------------------------------------------------------------------ the trainer


def sft_trainer(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Mapping[str, Any]],
    *,
    output_dir: str | Path,
    epochs: float = 1.0,
    max_steps: int = -1,
    learning_rate: float = 1e-4,
    batch_size: int = 4,
    grad_accum: int = 1,
    save_steps: int = 50,
    seed: int = 0,
    use_cpu: bool | None = None,
    bf16: bool | None = None,
    report_to: str = "none",
    push_to_hub: bool = False,
    hub_model_id: str | None = None,
) -> SFTTrainer:
    """TRL's SFTTrainer over pre-tokenised rows (`input_ids` + `completion_mask`).

    The loss covers only the completion_mask tokens (`completion_only_loss=True`: for a dataset with
    no prompt/completion columns TRL's default would train on every token); `max_length=None`
    (rows are whole episodes: truncating would cut the submission; bound them at build time);
    checkpoints every `save_steps` and at the end WITH optimizer state (`save_only_model=False`).
    `use_cpu` defaults to "no CUDA"; `bf16` (mixed precision) to whether the device computes
    bfloat16 natively (AVX512-BF16/AMX on a CPU), else fp32. Load the model in float32 either way.
    """
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if not rows:
        raise ConfigError("no rows to train on: build_demonstrations returned none")
    for k, row in enumerate(rows):
        ids, mask = row.get("input_ids"), row.get("completion_mask")
        if ids is None or mask is None or len(ids) != len(mask) or not any(mask):
            raise ConfigError(
                f"row {k} needs input_ids and a completion_mask of the same length with at least one "
                "1: build rows with build_demonstrations"
            )
    if use_cpu is None:
        use_cpu = not torch.cuda.is_available()
    if bf16 is None:
        bf16 = native_half_precision(torch.bfloat16) if use_cpu else torch.cuda.is_bf16_supported()
    dataset = Dataset.from_dict(
        {
            "input_ids": [list(r["input_ids"]) for r in rows],
            "completion_mask": [list(r["completion_mask"]) for r in rows],
        }
    )
    args = SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        max_steps=max_steps,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        seed=seed,
        completion_only_loss=True,
        max_length=None,
        use_cpu=use_cpu,
        bf16=bf16,
        activation_checkpointing=False,  # TRL defaults it on: slower on CPU
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_only_model=False,
        save_total_limit=2,
        report_to=report_to,
        project="dagent-sft",
        trackio_static_space_id=False if push_to_hub else None,
        push_to_hub=push_to_hub,
        hub_model_id=hub_model_id,
    )
    return SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
