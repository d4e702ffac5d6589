"""A real TRL GRPOTrainer step against the white-box environment, on CPU with a tiny Qwen3.

The model is `dagent.engine.models.tiny_qwen3()`: random weights over the REAL Qwen3 tokenizer and
chat template (so TRL's Qwen3 tool-call parser and response schema are the real ones). The step
shows: TRL discovers exactly our tools from the class's public methods, calls `reset(**row)` with
the dataset row (split, index), renders the reworded instruction into the prompt, and logs our
`get_reward()` as `rewards/WhiteBoxEnv/mean`.

A random model emits noise, so generation is steered with transformers' own `sequence_bias`
(passed through GRPOConfig.generation_kwargs): every prefix of one tool call gets a bias that
grows with its length, so the sampled completion IS that call. TRL then parses it with its real
Qwen3 parser, invokes our `submit_solution` with the bare number 3 (F27), the episode is graded
server side, and the logged reward is the correct answer's.
"""

from __future__ import annotations

import pytest

from dagent.core.reward import reward
from dagent.envs.contract import REWARD_COLUMN, trainer_rows
from dagent.envs.whitebox_runtime import white_box_env
from dagent.tools import episode as ep_mod
from dagent.tools import select

CALL = '<tool_call>\n{"name": "submit_solution", "arguments": {"answer": 3}}\n</tool_call><|im_end|>'


def steer(tokenizer) -> list:
    """`sequence_bias` entries that make sampling emit CALL: longer matched prefixes win."""
    ids = tokenizer(CALL, add_special_tokens=False)["input_ids"]
    return [[ids[: k + 1], 25.0 * (k + 1)] for k in range(len(ids))]


@pytest.mark.slow
def test_grpo_step_discovers_our_tools_resets_by_row_and_logs_our_reward(suite, backend, tmp_path):
    torch = pytest.importorskip("torch")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from dagent.engine.models import tiny_qwen3

    model_dir = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    Env = white_box_env(suite, backend=backend)
    rows = trainer_rows(suite.prompt_rows("train"))[:1]  # train[0]: "how many rows", gold 3
    assert rows[0]["prompt"] == [{"role": "user", "content": ""}] and rows[0]["index"] == 0

    finished_before = set(ep_mod._FINISHED)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=2,
        num_generations=2,
        gradient_accumulation_steps=1,
        max_completion_length=64,
        learning_rate=1e-6,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        max_tool_calling_iterations=2,
        generation_kwargs={"sequence_bias": steer(tokenizer)},
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[],
        args=args,
        train_dataset=Dataset.from_list(rows * 2),
        environment_factory=Env,
    )

    # TRL discovered exactly our tools, nothing more (reset/get_reward are not tools).
    discovered = {t.__name__ for t in trainer._env_tools[None]}
    assert discovered == set(select())
    assert trainer.reward_func_names == [REWARD_COLUMN]

    trainer.train()

    # reset was called with the row: the episodes the step ran are train[0], by split and index.
    ran = [s for eid, s in ep_mod._FINISHED.items() if eid not in finished_before]
    assert len(ran) == 2 and {(s["split"], s["index"], s["task_id"]) for s in ran} == {("train", 0, "demo.t0")}
    logged = trainer.state.log_history[0]
    assert f"rewards/{REWARD_COLUMN}/mean" in logged
    # TRL parsed the call and invoked our submit_solution(answer=3): graded correct server side,
    # with 0 tool calls before it, and that is the reward TRL logged.
    assert all(s["submitted"] and s["answer"] == "3" and s["correct"] for s in ran), ran
    assert logged[f"rewards/{REWARD_COLUMN}/mean"] == pytest.approx(reward(True, 0))
    assert logged["tools/call_frequency"] > 0
