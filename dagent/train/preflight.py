"""Checks that refuse a training run before it starts, each naming the fix.

Every check here guards a failure that otherwise shows up only as a healthy-looking run that
learns nothing (tests/train/test_preflight.py plants each one):

- F35: the agent's step cap above the ENVIRONMENT's step budget (tool calls per episode,
  `EpisodeConfig.max_steps`). This is not the reward's half-credit constant B: with the
  reciprocal reward there is no band where acting earns nothing, so B caps nothing.
- F38: a completion budget that cannot hold one tool round trip (a call, its clipped result, the
  submission), so every rollout is truncated before it can be graded.
- F39: a group size at which most groups score alike given the tier's measured base pass@1:
  P(all G alike) = p^G + (1-p)^G; such groups carry no gradient.
- F55: that check from the MEAN pass rate: per-task rates are spread (a tier of tasks solved
  always and tasks never solved has a mean of 0.5 and no mixed group at all), so it predicts far
  fewer alike groups than there are. Given the starting model's evaluation on the tier
  (`TaskRates.read`), the check averages each task's own P(alike) instead, and `TaskRates.mixed`
  names the tasks whose groups would carry a gradient.
- the chat template must render tool schemas and be prefix-preserving (TRL's own checks), or
  the trainer trains on a conversation the policy never saw;
- the split must have tasks (a healthy server with an empty split trains on nothing);
- on GPU, the launcher's venv `bin` must be on PATH (flashinfer shells out to ninja/nvcc at the
  first generation) and the loss's logits tensor must fit beside the optimizer state.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagent.core.outcome import EvalRecord
from dagent.harness.contract import Check, PreflightError, check_step_cap

CHARS_PER_TOKEN = 3.0  # conservative for tables and shell output (digits and symbols tokenise short)
CALL_TOKENS = 48  # a tool call with its JSON arguments and the template's scaffolding
SUBMIT_TOKENS = 40  # the submit_solution call and its acknowledgement


def round_trip_tokens(output_chars: int) -> int:
    """Tokens one tool round trip takes at most: a call, its result clipped to `output_chars`
    (plus the clip marker), the submission."""
    return CALL_TOKENS + math.ceil((output_chars + 120) / CHARS_PER_TOKEN) + SUBMIT_TOKENS


def check_completion_length(max_completion_length: int, output_chars: int) -> Check:
    """F38: `max_completion_length` counts tool-result tokens; it must hold one round trip."""
    need = round_trip_tokens(output_chars)
    if max_completion_length < need:
        raise PreflightError(
            f"completion_too_short: max_completion_length {max_completion_length} cannot hold one tool round "
            f"trip (about {need} tokens: a call, a result clipped to {output_chars} characters, the submission; "
            "TRL counts tool-result tokens in the completion): raise max_completion_length to at least "
            f"{need} or lower the tool output clip (F38)"
        )
    return Check("completion_length", True, f"{max_completion_length} tokens >= one round trip (~{need})")


def alike_probability(p: float, group: int) -> float:
    """P(every rollout of a group of `group` scores alike) at success rate p: p^G + (1-p)^G."""
    return p**group + (1.0 - p) ** group


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def alike_posterior(correct: int, samples: int, group: int) -> float:
    """A task's P(a group of `group` all alike) given `correct` of `samples` solved: the expectation of
    p^G + (1-p)^G under p ~ Beta(1 + correct, 1 + samples - correct) (a uniform prior), so 0 of 2
    is not read as "never" (the plug-in estimate would say 1.0)."""
    a, b = 1 + correct, 1 + samples - correct
    return math.exp(_log_beta(a + group, b) - _log_beta(a, b)) + math.exp(_log_beta(a, b + group) - _log_beta(a, b))


@dataclass(frozen=True)
class TaskRates:
    """Per-task (correct, graded samples) of the starting model on the training tier (F55)."""

    counts: tuple[tuple[str, int, int], ...]  # (task_id, correct, graded samples), graded tasks only

    @classmethod
    def of(cls, records: Iterable[Any]) -> TaskRates:
        """From evaluation records (`dagent.core.outcome.EvalRecord`); ungraded samples are left out."""
        tally: dict[str, list[int]] = {}
        for r in records:
            if r.correct is None:
                continue
            t = tally.setdefault(r.task_id, [0, 0])
            t[0] += int(bool(r.correct))
            t[1] += 1
        return cls(tuple((task, c, n) for task, (c, n) in sorted(tally.items())))

    @classmethod
    def read(cls, path: str | Path) -> TaskRates:
        """From an evaluation directory (`dagent eval --out DIR`: its one arm's records.jsonl) or the file itself."""
        file = Path(path)
        if file.suffix != ".jsonl":  # `dagent eval --out DIR` writes DIR/<arm>/records.jsonl: one arm, the model's
            arms = sorted(file.glob("*/records.jsonl"))
            file = file / "records.jsonl" if (file / "records.jsonl").is_file() or len(arms) != 1 else arms[0]
        if not file.is_file():
            raise PreflightError(
                f"no_base_evaluation: {file} does not exist: evaluate the starting model on the "
                "training tier first (dagent eval --split TIER --samples 2 --out DIR) and pass DIR"
            )
        rates = cls.of(EvalRecord.model_validate_json(line) for line in file.read_text().splitlines() if line.strip())
        if not rates.counts:
            raise PreflightError(f"no_graded_samples: {file} holds no graded sample to estimate per-task rates from")
        return rates

    @property
    def mean(self) -> float:
        return sum(c for _, c, _ in self.counts) / sum(n for _, _, n in self.counts)

    def alike(self, group: int) -> float:
        """The expected fraction of groups with every rollout alike, task by task (a task a group)."""
        return sum(alike_posterior(c, n, group) for _, c, n in self.counts) / len(self.counts)

    def only(self, task_ids: Iterable[str]) -> TaskRates:
        """The rates of these tasks alone (the rows a run trains on, e.g. after `mixed_rows`)."""
        keep = set(task_ids)
        return TaskRates(tuple(c for c in self.counts if c[0] in keep))

    def mixed(self, low: float = 0.2, high: float = 0.8) -> list[str]:
        """Tasks whose measured rate lies in [low, high]: the ones whose groups carry a gradient."""
        return [task for task, c, n in self.counts if low <= c / n <= high]


def mixed_rows(
    rows: list[dict[str, Any]], rates: TaskRates, low: float = 0.2, high: float = 0.8
) -> list[dict[str, Any]]:
    """The trainer rows of the tasks whose measured rate lies in [low, high] (F55); refuses when none do."""
    keep = set(rates.mixed(low, high))
    out = [r for r in rows if r.get("task_id") in keep]
    if not out:
        raise PreflightError(
            f"no_mixed_tasks: none of the {len(rows)} training tasks has a measured rate between "
            f"{low} and {high} in the base evaluation ({len(rates.counts)} tasks measured): evaluate "
            "the tasks you train on, with at least 2 samples, or train on another tier"
        )
    return out


def selected_rows(
    rows: list[dict[str, Any]], rates: TaskRates | None, *, mixed_only: bool
) -> tuple[list[dict[str, Any]], TaskRates | None]:
    """The rows a run trains on and the per-task rates its group-size check reads (F55): with
    `mixed_only`, the tasks `rates` measured between 0.2 and 0.8, and their rates only."""
    out = list(rows)
    if mixed_only and rates is not None and out:
        out = mixed_rows(out, rates)
        rates = rates.only(r.get("task_id") for r in out)  # the group-size check: the rows trained
    return out, rates


def blackbox_checks(
    recipe: Any, n_tasks: int, *, base_pass1: float | None = None, force: bool = False, rates: TaskRates | None = None
) -> list[Check]:
    """The checks that refuse a black-box recipe (`dagent.recipes.BlackboxRecipe`) before a run starts:
    tasks in its split, the agent's step cap within the environment's (F35), the group size (F39, F55)."""
    return [
        check_split(n_tasks, recipe.split),
        check_step_cap(recipe.agent_steps, recipe.env_max_steps),
        check_group_size(recipe.num_generations, base_pass1, rates=rates, force=force),
    ]


def check_group_size(
    group: int, base_pass1: float | None, *, rates: TaskRates | None = None, force: bool = False, limit: float = 0.5
) -> Check:
    """F39: refuse a group size where most groups would carry no gradient, unless forced; F55: from
    each task's own rate when the starting model's per-task evaluation (`rates`) is given."""
    if rates is not None:
        p_alike = rates.alike(group)
        detail = (
            f"G={group} over {len(rates.counts)} tasks' own rates (mean {rates.mean:.3f}): expected fraction of "
            f"groups all alike {p_alike:.3f} (the mean alone predicts {alike_probability(rates.mean, group):.3f}); "
            f"{len(rates.mixed())} tasks between 0.2 and 0.8"
        )
        if p_alike > limit and not force:
            raise PreflightError(
                f"zero_variance_groups: {detail}, so most groups carry no gradient: train on the tasks the model "
                "sometimes solves (--mixed-only with this --base-eval keeps those between 0.2 and 0.8), raise "
                "num_generations, or pass --force (F55)"
            )
        return Check("group_size", True, detail + (" (forced)" if p_alike > limit else ""))
    if base_pass1 is None:
        return Check(
            "group_size",
            True,
            f"G={group}: no measured base pass@1 given, P(all alike) unchecked "
            "(pass --base-pass1 from an evaluation of the starting model on the training tier)",
        )
    p_alike = alike_probability(base_pass1, group)
    detail = f"G={group} at base pass@1 {base_pass1:.3f}: P(all rollouts of a group alike) = {p_alike:.3f}"
    if p_alike > limit and not force:
        raise PreflightError(
            f"zero_variance_groups: {detail}, so most groups carry no gradient: raise num_generations, train "
            "on a tier the model sometimes solves (SFT warm start first if it never does), or pass --force (F39)"
        )
    return Check("group_size", True, detail + (" (forced)" if p_alike > limit else ""))


def check_template(tokenizer: Any, tools: list[dict[str, Any]]) -> Check:
    """The chat template renders tool schemas and is prefix-preserving (TRL's own checks)."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    probe = [{"role": "user", "content": "q"}]
    try:
        with_tools = tokenizer.apply_chat_template(probe, tools=tools, tokenize=False, add_generation_prompt=True)
        without = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - a foreign template error, named once
        raise PreflightError(
            f"template_cannot_render: the chat template failed on a tool conversation ({e}): "
            "use a tool-calling template (dagent ships one for SmolLM2)"
        ) from e
    name = tools[0]["function"]["name"] if tools else None
    if name is None or with_tools == without or name not in with_tools:
        raise PreflightError(
            "template_ignores_tools: the chat template renders no tool schemas, so the policy "
            "never sees its tools: use a tool-calling template (TRL refuses such templates too)"
        )
    if is_chat_template_prefix_preserving(tokenizer):
        return Check("template", True, "renders tools; prefix-preserving")
    try:  # what GRPOTrainer itself swaps in for a template it knows
        training = get_training_chat_template(tokenizer)
    except Exception:  # noqa: BLE001 - TRL raises for templates it has no training variant of
        training = None
    if training is None:
        raise PreflightError(
            "template_not_prefix_preserving: rendering a conversation's prefix is not a token "
            "prefix of rendering the whole (e.g. history <think> blocks dropped) and TRL has no "
            "training variant of it: use a prefix-preserving template (TRL's *_training.jinja)"
        )
    return Check(
        "template",
        True,
        "renders tools; not prefix-preserving itself: TRL trains with its prefix-preserving training variant",
    )


def check_split(n_tasks: int, split: str) -> Check:
    if n_tasks == 0:
        raise PreflightError(
            f"empty_split: split {split!r} has no tasks, the run would train on nothing: "
            "pick a split that has tasks (dagent tasks list --split ...)"
        )
    return Check("split", True, f"{split}: {n_tasks} tasks")


def check_venv_on_path(environ: dict[str, str] | None = None, executable: str = sys.executable) -> Check:
    """GPU: flashinfer shells out to ninja/nvcc from PATH at the first generation."""
    env = os.environ if environ is None else environ
    bin_dir = str(Path(executable).parent)
    if bin_dir not in env.get("PATH", "").split(os.pathsep):
        raise PreflightError(
            f"venv_not_on_path: {bin_dir} (the launcher's venv bin) is not on PATH; flashinfer "
            f"will fail at the first generation looking for ninja: export PATH={bin_dir}:$PATH"
        )
    return Check("venv_path", True, f"{bin_dir} on PATH")


def logits_bytes(batch: int, sequence: int, vocab: int, dtype_bytes: int = 4) -> int:
    """The loss's logits tensor (batch x sequence x vocabulary), fp32 by default."""
    return batch * sequence * vocab * dtype_bytes


def check_logits_memory(batch: int, sequence: int, vocab: int, params: int, free_bytes: int) -> Check:
    """GPU: logits beside weights, gradients and Adam state (16 bytes a parameter in fp32)."""
    need = logits_bytes(batch, sequence, vocab) + 16 * params
    detail = (
        f"logits {logits_bytes(batch, sequence, vocab) / 2**30:.1f} GiB + weights/optimizer "
        f"{16 * params / 2**30:.1f} GiB vs {free_bytes / 2**30:.1f} GiB free"
    )
    if need > free_bytes:
        raise PreflightError(
            f"logits_do_not_fit: {detail}: lower per_device_train_batch_size or "
            "max_completion_length, or use a bigger GPU"
        )
    return Check("logits_memory", True, detail)
