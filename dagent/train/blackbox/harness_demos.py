"""Black-box warm start: demonstrations in the harness's OWN format, captured as training captures them.

A warm start made from white-box episodes (`submit_solution` tool calls in dagent's tool loop)
teaches a format no harness speaks: under opencode or pi the agent must write
`/workdir/answer.txt` through the harness's own tools, with the harness's system prompt, tool
schemas and history. So these demonstrations are made by running the REAL harness (opencode, pi) on
train tasks in the real sandbox, behind the same capture proxy as training, against an engine that
replays the task's reference program as that harness's tool calls:

    turn 1   bash: python3 - <<'PY' > /workdir/answer.txt   (the reference program, which prints
             the answer) ... PY; then cat /workdir/answer.txt
    turn 2   a closing sentence
    (opencode's title call gets a title; it is an auxiliary root, never trained, F03)

`ReplayPolicy` is a language-model stand-in inside the real local engine (`LocalEngine`: the target
model's tokenizer and chat template, the engine's sampling and hermes tool-call parsing): its
logits put all mass on the next token of the script, so the tokens the harness receives are the
script's, rendered and re-rendered exactly as the trained model's would be. Each rollout is graded
by the environment; only CORRECT rollouts whose agent chain converts to one training row with the
exact-token audit (`dagent.train.blackbox.rollouts.row_of`, the sync trainer's own conversion) become rows:
`input_ids` = the row's prompt + completion, `completion_mask` = 0 on the prompt and the tool
results, 1 on the tokens the engine produced. These are the rows `sft_trainer` trains, and the
prompts black-box GRPO then sees token for token.

    rows = build_harness_demonstrations(suite, "train:easy", n=64, model_dir=path, harness="pi")
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dagent.core.sampling import RECIPE_SAMPLING
from dagent.core.suite import TaskSuite, parse_split
from dagent.core.task import Task
from dagent.engine.generation import LocalEngine
from dagent.engine.server import create_app
from dagent.errors import ConfigError
from dagent.harness.opencode import OpencodeConfig
from dagent.harness.pi import PiConfig
from dagent.recipes import BlackboxRecipe
from dagent.runtime.blackbox import BlackBoxRuntime
from dagent.serving import ThreadedServer
from dagent.train.blackbox.rollouts import row_of
from dagent.train.sft import heredoc

__all__ = ["ReplayPolicy", "ReplayScript", "build_harness_demonstrations", "replay_command"]

_LOG = logging.getLogger(__name__)
TITLE = "Answering a question about a table"
CLOSING = "I ran the analysis and wrote the answer to /workdir/answer.txt."


def replay_command(program: str) -> str:
    """The bash command a demonstration's tool call runs: the reference program (which prints the
    answer) from a quoted heredoc (the white-box demonstrations' own, `sft.heredoc`) into the answer
    file, which is then shown."""
    return (
        heredoc(program).replace("python3 - <<", "python3 - > /workdir/answer.txt <<", 1) + "\ncat /workdir/answer.txt"
    )


class ReplayScript:
    """What the replaying engine says, given the rendered prompt, for the task being played (set
    `task` before each rollout; the builder plays them one at a time)."""

    def __init__(self) -> None:
        self.task: Task | None = None

    def __call__(self, prompt: str) -> str:
        if "You are a title generator" in prompt:  # opencode's auxiliary title call
            return TITLE
        if self.task is None:
            raise ConfigError("ReplayScript.task is not set: the builder sets it before each rollout")
        if prompt.count("<tool_response>") == 0:
            call = {
                "name": "bash",
                "arguments": {
                    "command": replay_command(self.task.solution),
                    "description": "Run the analysis and write the answer file",
                },
            }
            return "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
        return CLOSING


class ReplayPolicy:
    """A causal-LM stand-in for `LocalEngine`: logits put all mass (30.0 over zeros) on the next
    token of `script(prompt)` (prompt text -> what to say), then on the stop token. Its cache is
    `(tokens, position)`."""

    def __init__(self, tokenizer: Any, vocab: int, stop_id: int, script: Callable[[str], str]) -> None:
        self.tokenizer, self.vocab, self.stop_id, self.script = tokenizer, vocab, stop_id, script
        self.config = None  # not a PreTrainedModel: the engine serves it one sequence at a time

    def __call__(self, input_ids: Any, cache: Any = None, **_: Any) -> Any:
        import torch

        if cache is None:
            text = self.tokenizer.decode(input_ids[0].tolist())
            cache = (self.tokenizer.encode(self.script(text), add_special_tokens=False) + [self.stop_id], 0)
        else:
            cache = (cache[0], cache[1] + 1)
        tokens, pos = cache
        logits = torch.zeros(1, 1, self.vocab)
        logits[0, 0, tokens[min(pos, len(tokens) - 1)]] = 30.0
        return SimpleNamespace(logits=logits, cache=cache)


def _replay_engine(model_dir: Path, served: str, script: ReplayScript) -> tuple[ThreadedServer, Any]:
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if not isinstance(stop, int) or stop == tokenizer.unk_token_id:
        stop = tokenizer.eos_token_id
    vocab = int(AutoConfig.from_pretrained(str(model_dir)).vocab_size)
    engine = LocalEngine(
        ReplayPolicy(tokenizer, vocab, stop, script),
        tokenizer,
        eos_token_ids=(stop,),
        max_model_len=65_536,
        name=served,
    )
    return ThreadedServer(create_app(engine, served_model_name=served, sampling=RECIPE_SAMPLING)).start(), tokenizer


def build_harness_demonstrations(
    suite: TaskSuite,
    split: str = "train:easy",
    *,
    n: int,
    model_dir: str | Path,
    harness: str = "pi",
    served: str | None = None,
    recipe: BlackboxRecipe | None = None,
    seed: int = 0,
    max_length: int | None = None,
    sandbox_dir: str | Path | None = None,
    echo: Any = _LOG.info,
) -> list[dict[str, Any]]:
    """Up to `n` rows from `split` (train only), tasks in a seeded order (module docstring). The
    harness runs under `recipe`'s conditions (the black-box cpu preset by default: its step cap and
    tokens per call), so the prompts are the ones its GRPO run will see. Tasks whose replay is not
    graded correct, does not convert to one exact row, or exceeds `max_length` tokens are skipped
    and counted; no row at all is a ConfigError."""
    name = parse_split(split, suite.bases)
    if name.base != "train":
        raise ConfigError(
            f"demonstrations come from the train split only, got {split!r}: demonstrations of "
            "held-out tasks would leak their answers into the policy; use train or train:<tier>"
        )
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    if harness not in ("opencode", "pi"):
        raise ConfigError(f"unknown harness {harness!r}: use opencode or pi")
    recipe = recipe or BlackboxRecipe.cpu()
    served = served or Path(str(model_dir)).name
    script = ReplayScript()
    server, tokenizer = _replay_engine(Path(model_dir), served, script)
    conditions = dict(model=served, steps=recipe.agent_steps, max_output_tokens=recipe.max_output_tokens)
    tasks = suite.tasks(split)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}

    def placeholder() -> tuple[list[int], list[int]]:
        return [tokenizer.eos_token_id], [tokenizer.eos_token_id]

    try:
        with BlackBoxRuntime(
            suite,
            server.url,
            model=served,
            harness=harness,
            sampling=RECIPE_SAMPLING,
            timeout_s=recipe.agent_timeout_s,
            opencode=OpencodeConfig(**conditions),
            pi=PiConfig(**conditions),
            fork_threshold_tokens=recipe.fork_threshold_tokens,
            sandbox_dir=sandbox_dir,
        ) as runtime:
            for index in order:
                if len(rows) >= n:
                    break
                task = tasks[index]
                script.task = task
                rollout = runtime.run_rollout(split, index)
                if rollout.outcome != "correct":
                    skipped[task.task_id] = f"{rollout.outcome}: {rollout.cause or rollout.note or ''}"[:200]
                    continue
                row = row_of(rollout, harness, recipe.fork_threshold_tokens, placeholder)
                if row.dropped is not None or row.audit != "exact":
                    skipped[task.task_id] = f"not one exact row: {row.dropped or row.audit}"
                    continue
                input_ids = [*row.prompt_ids, *row.completion_ids]
                if max_length is not None and len(input_ids) > max_length:
                    skipped[task.task_id] = f"{len(input_ids)} tokens > max_length {max_length}"
                    continue
                rows.append(
                    {
                        "input_ids": input_ids,
                        "completion_mask": [0] * len(row.prompt_ids) + list(row.env_mask),
                        "task_id": task.task_id,
                        "index": index,
                        "harness": harness,
                    }
                )
                echo(
                    f"demonstration {len(rows)}/{n}: {task.task_id} ({len(input_ids)} tokens, "
                    f"{sum(row.env_mask)} trained, {harness})"
                )
    finally:
        server.stop()
    if skipped:
        echo(f"skipped {len(skipped)} task(s): " + "; ".join(f"{k}: {v}" for k, v in list(skipped.items())[:5]))
    if not rows:
        raise ConfigError(
            f"no {harness} demonstration could be made from {split} ({len(skipped)} skipped: "
            f"{next(iter(skipped.values()), 'no tasks')})"
        )
    return rows
