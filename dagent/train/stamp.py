"""`provenance.json` (dagent.provenance, plus the recipe and the base model) in the output
directory when training starts and in every `checkpoint-N` as it is saved, so a checkpoint found
on disk or in a Hub repo says what made it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from dagent.provenance import STAMP_FILE as FILE


@dataclass
class ProvenanceStamp(TrainerCallback):
    record: dict[str, Any]

    def _write(self, folder: Path, step: int | None, world_size: int) -> None:
        if folder.is_dir():
            record = {**self.record, "global_step": step, "world_size": world_size}  # processes that trained it
            (folder / FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            self._write(Path(args.output_dir), state.global_step, args.world_size)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._write(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step, args.world_size)
        return control
