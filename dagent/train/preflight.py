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
from pathlib import Path
from typing import Any

from dagent.harness.contract import Check, PreflightError

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
            f"{need} or lower the tool output clip (F38)")
    return Check("completion_length", True, f"{max_completion_length} tokens >= one round trip (~{need})")


def alike_probability(p: float, group: int) -> float:
    """P(every rollout of a group of `group` scores alike) at success rate p: p^G + (1-p)^G."""
    return p ** group + (1.0 - p) ** group


def check_group_size(group: int, base_pass1: float | None, *, force: bool = False, limit: float = 0.5) -> Check:
    """F39: refuse a group size where most groups would carry no gradient, unless forced."""
    if base_pass1 is None:
        return Check("group_size", True, f"G={group}: no measured base pass@1 given, P(all alike) unchecked "
                     "(pass --base-pass1 from an evaluation of the starting model on the training tier)")
    p_alike = alike_probability(base_pass1, group)
    detail = f"G={group} at base pass@1 {base_pass1:.3f}: P(all rollouts of a group alike) = {p_alike:.3f}"
    if p_alike > limit and not force:
        raise PreflightError(
            f"zero_variance_groups: {detail}, so most groups carry no gradient: raise num_generations, train "
            "on a tier the model sometimes solves (SFT warm start first if it never does), or pass --force (F39)")
    return Check("group_size", True, detail + (" (forced)" if p_alike > limit else ""))


def check_template(tokenizer: Any, tools: list[dict[str, Any]]) -> Check:
    """The chat template renders tool schemas and is prefix-preserving (TRL's own checks)."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    probe = [{"role": "user", "content": "q"}]
    try:
        with_tools = tokenizer.apply_chat_template(probe, tools=tools, tokenize=False, add_generation_prompt=True)
        without = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - a foreign template error, named once
        raise PreflightError(f"template_cannot_render: the chat template failed on a tool conversation ({e}): "
                             "use a tool-calling template (dagent ships one for SmolLM2)") from e
    name = tools[0]["function"]["name"] if tools else None
    if name is None or with_tools == without or name not in with_tools:
        raise PreflightError("template_ignores_tools: the chat template renders no tool schemas, so the policy "
                             "never sees its tools: use a tool-calling template (TRL refuses such templates too)")
    if is_chat_template_prefix_preserving(tokenizer):
        return Check("template", True, "renders tools; prefix-preserving")
    try:  # what GRPOTrainer itself swaps in for a template it knows
        training = get_training_chat_template(tokenizer)
    except Exception:  # noqa: BLE001 - TRL raises for templates it has no training variant of
        training = None
    if training is None:
        raise PreflightError("template_not_prefix_preserving: rendering a conversation's prefix is not a token "
                             "prefix of rendering the whole (e.g. history <think> blocks dropped) and TRL has no "
                             "training variant of it: use a prefix-preserving template (TRL's *_training.jinja)")
    return Check("template", True, "renders tools; not prefix-preserving itself: TRL trains with its "
                 "prefix-preserving training variant")


def check_split(n_tasks: int, split: str) -> Check:
    if n_tasks == 0:
        raise PreflightError(f"empty_split: split {split!r} has no tasks, the run would train on nothing: "
                             "pick a split that has tasks (dagent tasks list --split ...)")
    return Check("split", True, f"{split}: {n_tasks} tasks")


def check_venv_on_path(environ: dict[str, str] | None = None, executable: str = sys.executable) -> Check:
    """GPU: flashinfer shells out to ninja/nvcc from PATH at the first generation."""
    env = os.environ if environ is None else environ
    bin_dir = str(Path(executable).parent)
    if bin_dir not in env.get("PATH", "").split(os.pathsep):
        raise PreflightError(f"venv_not_on_path: {bin_dir} (the launcher's venv bin) is not on PATH; flashinfer "
                             f"will fail at the first generation looking for ninja: export PATH={bin_dir}:$PATH")
    return Check("venv_path", True, f"{bin_dir} on PATH")


def logits_bytes(batch: int, sequence: int, vocab: int, dtype_bytes: int = 4) -> int:
    """The loss's logits tensor (batch x sequence x vocabulary), fp32 by default."""
    return batch * sequence * vocab * dtype_bytes


def check_logits_memory(batch: int, sequence: int, vocab: int, params: int, free_bytes: int) -> Check:
    """GPU: logits beside weights, gradients and Adam state (16 bytes a parameter in fp32)."""
    need = logits_bytes(batch, sequence, vocab) + 16 * params
    detail = (f"logits {logits_bytes(batch, sequence, vocab) / 2**30:.1f} GiB + weights/optimizer "
              f"{16 * params / 2**30:.1f} GiB vs {free_bytes / 2**30:.1f} GiB free")
    if need > free_bytes:
        raise PreflightError(f"logits_do_not_fit: {detail}: lower per_device_train_batch_size or "
                             "max_completion_length, or use a bigger GPU")
    return Check("logits_memory", True, detail)
