"""A vLLM logits processor for tests: steer the tiny random Qwen3 towards a scripted output.

Loaded INSIDE the vLLM server (`--logits-processors vllm_steering:ScriptSteering`, this folder on
PYTHONPATH), never imported by pytest. It is the vLLM twin of `tests.capture.engines.Steered`:
the model's real forward pass runs and a large bias is added to the script's next token, so the
random network emits a known, realistic turn (a tool call, a think block). The script is read, per
request, from the JSON file named by DAGENT_STEER_FILE (a list of token ids, or null for none).
vLLM reports RAW logprobs (before processors), so captured logprobs stay the model's own.
"""

from __future__ import annotations

import json
import os

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

BIAS = 100.0


class ScriptSteering(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory) -> None:  # noqa: ANN001 - vLLM's API
        self.path = os.environ.get("DAGENT_STEER_FILE", "")
        self.active: dict[int, tuple[list[int], list[int]]] = {}  # row -> (script, output ids)

    def is_argmax_invariant(self) -> bool:
        return False

    def _script(self, params, prompt_ids, output_ids):  # noqa: ANN001, ANN202
        try:
            with open(self.path, encoding="utf-8") as fh:
                script = json.load(fh)
        except (OSError, ValueError):
            return None
        return (script, output_ids) if script else None

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.active, batch_update, self._script)

    def apply(self, logits):  # noqa: ANN001, ANN201
        for row, (script, output_ids) in self.active.items():
            logits[row, script[min(len(output_ids), len(script) - 1)]] += BIAS
        return logits
