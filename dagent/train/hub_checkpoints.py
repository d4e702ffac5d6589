"""Checkpoints to a Hub model repo, each as `checkpoint-N/`, with a model card; and back.

transformers' own `push_to_hub` (hub_strategy="checkpoint") keeps only `last-checkpoint/` in the
repo, so `--resume-from OWNER/NAME@checkpoint-N` could not name an earlier one. `CheckpointPusher`
is a callback that, after every save, uploads the whole `checkpoint-N/` folder (weights,
tokenizer, optimizer, scheduler and trainer state, RNG state, `provenance.json`) under that
name, then rewrites the repo's README.md (`model_card`); when training ends, the trained model
goes to the repo's root, so the repo itself loads as a model: the recipe, the data, the base model and
the provenance, and the pass@1 of base and checkpoint with their CIs when an evaluation gave
them. `resolve_resume` (dagent.train.assembly) downloads `checkpoint-N/` back for TRL to resume from
(it resumes from local paths only).

The token comes from the environment (`HF_TOKEN`) or an injected `HfApi`; it is never written to
a card, a log or a command line (F22): the card is built from an allow-list of fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

CARD_FIELDS = (
    "split",
    "num_generations",
    "beta",
    "learning_rate",
    "warmup_steps",
    "max_steps",
    "max_completion_length",
    "output_chars",
    "tools",
    "mode",
    "harnesses",
    "sampling",
    "agent_steps",
)


def model_card(
    repo_id: str,
    *,
    base_model: str,
    recipe: dict[str, Any],
    provenance: dict[str, Any],
    step: int | None = None,
    scores: dict[str, dict[str, Any]] | None = None,
) -> str:
    """README.md of a training run's model repo (YAML header + markdown)."""
    suite = provenance.get("suite") or {}
    libraries = provenance.get("libraries") or {}
    project = provenance.get("project") or {}
    header = [
        "---",
        "library_name: transformers",
        "tags:",
        "- dagent",
        "- grpo",
        "- trl",
        "- data-agent",
        f"base_model: {base_model}" if "/" in base_model and not Path(base_model).exists() else "",
        "---",
    ]
    url, revision = project.get("url"), project.get("revision")
    if url:  # the project's own repository at the commit that trained this (never a placeholder)
        dagent = f"[dagent]({url}/tree/{revision})" if revision and "github.com" in url else f"[dagent]({url})"
    else:
        dagent = "dagent"
    lines = [h for h in header if h] + [
        f"# {repo_id}",
        "",
        f"A data agent trained with {dagent} GRPO ({recipe.get('mode', 'white-box')}) from "
        f"`{base_model}`" + (f"; latest checkpoint: `checkpoint-{step}`." if step is not None else "."),
        "",
        "## Recipe",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    lines += [
        f"| {k} | `{json.dumps(recipe[k]) if isinstance(recipe[k], (dict, list)) else recipe[k]}` |"
        for k in CARD_FIELDS
        if k in recipe
    ]
    lines += [
        "",
        "## Data",
        "",
        f"Task suite `{suite.get('source', '?')}`, digest `{suite.get('digest', '?')}`, tasks per split "
        f"{json.dumps(suite.get('tasks', {}))}.",
        "",
    ]
    if scores:
        lines += ["## Evaluation", "", "| arm | split | pass@1 | 95% CI | tasks |", "|---|---|---|---|---|"]
        for arm, s in scores.items():
            ci = s.get("ci") or [None, None]
            fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"
            lines.append(
                f"| {arm} | {s.get('split', '')} | {fmt(s.get('pass@1'))} | [{fmt(ci[0])}, {fmt(ci[1])}] | "
                f"{s.get('tasks', '')} |"
            )
        lines.append("")
    lines += [
        "## Provenance",
        "",
        f"- project revision `{project.get('revision') or '?'}`" + (" (dirty tree)" if project.get("dirty") else ""),
        "- libraries: " + ", ".join(f"{k} {v}" for k, v in sorted(libraries.items()) if v),
        f"- grader digest `{provenance.get('grader', '?')}`",
        f"- hardware: {json.dumps(provenance.get('hardware', {}))}",
        "",
    ]
    return "\n".join(lines)


@dataclass
class CheckpointPusher(TrainerCallback):
    """After every save: `checkpoint-N/` to `repo_id`, then the card (module docstring)."""

    repo_id: str
    base_model: str
    recipe: dict[str, Any]
    provenance: dict[str, Any]
    api: Any = None
    private: bool = True
    pushed: list[str] = field(default_factory=list)

    def _api(self) -> Any:
        if self.api is None:
            from huggingface_hub import HfApi

            self.api = HfApi()
        return self.api

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._api().create_repo(self.repo_id, repo_type="model", private=self.private, exist_ok=True)
        return control

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control
        name = f"checkpoint-{state.global_step}"
        folder = Path(args.output_dir) / name
        api = self._api()
        api.upload_folder(
            repo_id=self.repo_id,
            repo_type="model",
            folder_path=str(folder),
            path_in_repo=name,
            commit_message=f"{name} (optimizer, scheduler and trainer state included)",
        )
        api.upload_file(
            repo_id=self.repo_id,
            repo_type="model",
            path_in_repo="README.md",
            path_or_fileobj=model_card(
                self.repo_id,
                base_model=self.base_model,
                recipe=self.recipe,
                provenance=self.provenance,
                step=state.global_step,
            ).encode(),
            commit_message=f"model card at {name}",
        )
        self.pushed.append(name)
        return control

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        """The trained model at the repo's root (checkpoints beside it), so `OWNER/RUN` itself loads
        as a model (`--model OWNER/RUN`, `from_pretrained`)."""
        if not state.is_world_process_zero or model is None:
            return control
        folder = Path(args.output_dir) / ".hub-root"
        model.save_pretrained(str(folder))
        if processing_class is not None:
            processing_class.save_pretrained(str(folder))
        self._api().upload_folder(
            repo_id=self.repo_id,
            repo_type="model",
            folder_path=str(folder),
            path_in_repo="",
            commit_message=f"the trained model at step {state.global_step}, at the root",
        )
        self.pushed.append("final")
        return control
