"""Continuous batching changes when a token is computed, never which one.

Runs the real tiny random Qwen3 (real Qwen3 tokenizer and template): concurrent requests of
different prompt lengths and sampling settings must give, token for token, what each gives alone
(and what a teacher-forced forward pass gives), while sharing forward passes; prefix reuse must
give what a full prefill gives; a model that cannot be batched runs one request at a time.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dagent.core.sampling import Sampling  # noqa: E402
from dagent.engine import batching  # noqa: E402
from dagent.engine.generation import GenerationRequest, LocalEngine  # noqa: E402
from dagent.engine.models import _dtype, load_model  # noqa: E402

TOL = 1e-4  # the teacher-forced tolerance of tests/engine/test_local_engine.py


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def loaded() -> Any:
    return load_model("tiny-qwen3")


def make_engine(loaded: Any, **options: Any) -> LocalEngine:
    return LocalEngine(
        loaded.model,
        loaded.tokenizer,
        eos_token_ids=loaded.eos_token_ids,
        max_model_len=loaded.max_model_len,
        name="tiny-qwen3",
        **options,
    )


@pytest.fixture(scope="module")
def engine(loaded: Any) -> LocalEngine:
    return make_engine(loaded)


def prompt(engine: LocalEngine, text: str, system: str | None = None) -> tuple[int, ...]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return tuple(engine.encode(engine.render(messages)))


SAMPLINGS = [
    Sampling(temperature=0.8),
    Sampling(temperature=0.0),
    Sampling(temperature=0.7, top_p=0.9, top_k=50),
    Sampling(temperature=1.0),
    Sampling(temperature=1.2, top_k=5),
    Sampling(temperature=0.8),
]


def requests(engine: LocalEngine) -> list[GenerationRequest]:
    """Prompts of 9 to ~300 tokens (so rows differ a lot in length), each its own sampling."""
    texts = ["Hi", "Count the rows of flights.csv " * 3, "naïve café 数字 😀 " * 20, "x " * 290, "SELECT 1;", "Why?"]
    return [
        GenerationRequest(
            prompt_ids=prompt(engine, t),
            max_tokens=12 + 3 * i,
            sampling=SAMPLINGS[i],
            seed=100 + i,
            num_top_logprobs=2,
            stop=("zz",) if i == 4 else (),
        )
        for i, t in enumerate(texts)
    ]


def run_together(engine: LocalEngine, reqs: list[GenerationRequest]) -> list[Any]:
    """Start every request at once (a barrier), each consumed by its own thread."""
    out: list[Any] = [None] * len(reqs)
    barrier = threading.Barrier(len(reqs))

    def work(i: int) -> None:
        gen = engine.generate(reqs[i])
        barrier.wait()
        out[i] = gen.run()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def teacher_forced(model: Any, prompt_ids: tuple[int, ...], ids: list[int]) -> Any:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(prompt_ids) + ids])).logits[0].float()
    return torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)


def assert_same(a: Any, b: Any) -> None:
    assert a.token_ids == b.token_ids
    assert (a.text, a.finish_reason, a.stop_reason) == (b.text, b.finish_reason, b.stop_reason)
    for x, y in zip(a.steps, b.steps, strict=True):
        assert x.logprob == pytest.approx(y.logprob, abs=TOL)
        assert [i for i, _ in x.top] == [i for i, _ in y.top]


def test_the_tiny_qwen3_is_served_batched(engine: LocalEngine) -> None:
    assert engine.batched and engine.model.config._attn_implementation == batching.ATTENTION


def test_concurrent_requests_share_steps_and_each_gets_what_it_gets_alone(loaded: Any) -> None:
    engine = make_engine(loaded, prefix_cache_bytes=0)
    reqs = requests(engine)
    alone = [engine.generate(r).run() for r in reqs]
    steps_alone = engine.scheduler.steps
    together = run_together(engine, reqs)
    steps_together = engine.scheduler.steps - steps_alone
    for a, b in zip(alone, together, strict=True):
        assert_same(a, b)
    assert steps_together < steps_alone * 0.6  # shared forward passes (alone: one row per step)
    for req, gen in zip(reqs, together, strict=True):
        expected = teacher_forced(engine.model, req.prompt_ids, gen.token_ids)
        for t, step in enumerate(gen.steps):
            assert step.logprob == pytest.approx(expected[t, step.token_id].item(), abs=TOL)
        if req.sampling.greedy:
            assert gen.token_ids == expected.argmax(-1).tolist()


def test_a_seeded_request_repeats_whatever_runs_beside_it(engine: LocalEngine) -> None:
    reqs = requests(engine)
    target = reqs[2]
    first = run_together(engine, [target, reqs[0], reqs[3]])[0]
    second = run_together(engine, [reqs[5], target, reqs[1], reqs[4]])[1]
    assert_same(first, second)
    assert_same(first, engine.generate(target).run())


def test_a_prompt_longer_than_a_prefill_chunk_is_prefilled_in_chunks(loaded: Any) -> None:
    engine = make_engine(loaded, prefix_cache_bytes=0)
    engine.scheduler.chunk_tokens = 7  # 300-token prompt: ~43 chunks, each beside decoding rows
    reqs = requests(engine)
    chunked = run_together(engine, reqs[2:4])
    for req, gen in zip(reqs[2:4], chunked, strict=True):
        expected = teacher_forced(engine.model, req.prompt_ids, gen.token_ids)
        for t, step in enumerate(gen.steps):
            assert step.logprob == pytest.approx(expected[t, step.token_id].item(), abs=TOL)


def test_prefix_reuse_gives_what_a_full_prefill_gives(loaded: Any) -> None:
    cached, fresh = make_engine(loaded), make_engine(loaded, prefix_cache_bytes=0)
    system = "You are a data agent. " * 20
    first = GenerationRequest(
        prompt_ids=prompt(cached, "How many rows?", system), max_tokens=10, sampling=Sampling(temperature=0.8), seed=1
    )
    turn = cached.generate(first).run()
    # the agent's next turn: the whole first turn, then a tool result (extends the cached tokens)
    follow = first.prompt_ids + tuple(turn.token_ids) + tuple(cached.encode("\n<tool_response>42</tool_response>"))
    other_task = prompt(cached, "Which column is empty?", system)  # shares the system prompt only
    before = cached.backend.reused_tokens
    for ids in (follow, other_task):
        req = GenerationRequest(prompt_ids=ids, max_tokens=10, sampling=Sampling(temperature=0.8), seed=2)
        assert_same(cached.generate(req).run(), fresh.generate(req).run())
    reused = cached.backend.reused_tokens - before
    assert reused >= len(first.prompt_ids) + len(turn.token_ids) - 1 + len(system.split()) // 2
    assert fresh.backend.reused_tokens == 0


def test_a_group_of_identical_prompts_is_prefilled_once(loaded: Any) -> None:
    engine = make_engine(loaded)
    ids = prompt(engine, "Count the rows of flights.csv, then report the number. " * 8)
    group = [
        GenerationRequest(prompt_ids=ids, max_tokens=8, sampling=Sampling(temperature=1.0), seed=s) for s in range(4)
    ]
    before = engine.backend.reused_tokens
    together = run_together(engine, group)
    assert engine.backend.reused_tokens - before >= 3 * (len(ids) - 1)  # GRPO: G rollouts, one prefill
    alone = make_engine(loaded, prefix_cache_bytes=0)
    for req, gen in zip(group, together, strict=True):
        assert_same(gen, alone.generate(req).run())
    assert len({tuple(g.token_ids) for g in together}) > 1  # seeds differ, so rollouts do


def test_a_group_reads_its_shared_prompt_once_and_decodes_what_each_row_decodes_alone(
    loaded: Any, monkeypatch: Any
) -> None:
    """A GRPO group's rows hold their prompt's keys by reference (no copy each) and attend to them
    together: one product for all the group's queries, then each row's own positions, merged by
    log-sum-exp; the tokens are what each row samples alone."""
    engine = make_engine(loaded)
    ids = prompt(engine, "Count the rows of flights.csv, then report the number. " * 8)
    group = [
        GenerationRequest(prompt_ids=ids, max_tokens=8, sampling=Sampling(temperature=1.0), seed=s) for s in range(4)
    ]
    queries: list[int] = []
    original = batching.attention_lse

    def counting(query, keys, values, scale):
        if query.shape[0] == 1:
            queries.append(query.shape[2])
        return original(query, keys, values, scale)

    monkeypatch.setattr(batching, "attention_lse", counting)
    together = run_together(engine, group)
    assert max(queries) == 3  # three rows read the first row's prompt together (the first reads its own)
    alone = make_engine(loaded, prefix_cache_bytes=0)
    for req, gen in zip(group, together, strict=True):
        assert_same(gen, alone.generate(req).run())


def test_the_self_check_refuses_a_shared_prefix_merged_wrong(loaded: Any, monkeypatch: Any, caplog: Any) -> None:
    """Planted fault: the shared prefix's part of the attention kept and the row's own positions
    dropped: the self-check must fall back (the shared rows no longer equal recomputed ones), and
    say so: a silent fallback to one sequence at a time made black-box steps 4-5x slower."""
    monkeypatch.setattr(batching, "merge", lambda a, b: a[0])
    with caplog.at_level("WARNING", logger="dagent.engine.batching"):
        assert batching.RaggedBackend.for_model(loaded.model, 0) is None
    assert "failed its self-check" in caplog.text and "one sequence at a time" in caplog.text
    monkeypatch.undo()
    assert batching.RaggedBackend.for_model(loaded.model, 0) is not None


def test_a_consumer_that_stops_early_frees_its_row(engine: LocalEngine) -> None:
    long = GenerationRequest(
        prompt_ids=prompt(engine, "Hi"), max_tokens=2000, sampling=Sampling(temperature=1.0), seed=3, ignore_eos=True
    )
    gen = engine.generate(long)
    stream = iter(gen)
    next(stream), next(stream)
    stream.close()  # what a closed HTTP stream does to the server's iterator
    short = engine.generate(requests(engine)[0]).run()
    assert short.finish_reason is not None
    deadline = time.monotonic() + 10
    while engine.scheduler._thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.scheduler._thread is None  # nothing left running: the thread ended
    assert len(gen.steps) == 2


class OneAtATime:
    """A causal-LM callable the batched backend cannot take (not a transformers model): the
    engine must serve it one sequence at a time. Records the widest batch it was handed."""

    def __init__(self, model: Any) -> None:
        self.model, self.widest, self.active = model, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *, input_ids: Any, cache: Any = None, **kw: Any) -> Any:
        with self.lock:
            self.active += 1
            self.widest = max(self.widest, self.active, input_ids.shape[0])
        try:
            time.sleep(0.001)
            return self.model(input_ids=input_ids, cache=cache, **kw)
        finally:
            with self.lock:
                self.active -= 1


def test_a_model_that_cannot_be_batched_is_served_one_request_at_a_time(loaded: Any, engine: LocalEngine) -> None:
    wrapped = OneAtATime(loaded.model)
    serial = LocalEngine(
        wrapped, loaded.tokenizer, eos_token_ids=loaded.eos_token_ids, max_model_len=loaded.max_model_len
    )
    assert not serial.batched
    reqs = requests(engine)[:4]
    for a, b in zip(run_together(serial, reqs), [engine.generate(r).run() for r in reqs], strict=True):
        assert_same(a, b)
    assert wrapped.widest == 1


def test_the_self_check_refuses_batching_that_changes_logits(loaded: Any, monkeypatch: Any) -> None:
    """Planted fault: packed rows that never advance their cached length (so every decode step
    overwrites the previous position's keys): the self-check must fall back to serial."""
    model = loaded.model
    before = model.config._attn_implementation
    monkeypatch.setattr(batching.PackedStep, "commit", lambda self, new_tokens: None)
    assert batching.RaggedBackend.for_model(model, 0) is None
    assert model.config._attn_implementation == before  # left as it was
    monkeypatch.undo()
    assert batching.RaggedBackend.for_model(model, 0) is not None


def test_half_precision_is_batched_within_its_rounding_and_a_planted_fault_still_refused(monkeypatch: Any) -> None:
    """In bfloat16 a cached forward differs from a full one on tail ids by tenths of a nat
    whatever computes it (transformers' own cached decode too), so the self-check judges half
    precision by the expected error under the distribution; a row that never advances its cache
    (keys overwritten every step) is still refused."""
    half = load_model("tiny-qwen3", dtype="bfloat16").model
    assert half.dtype == torch.bfloat16
    assert batching.RaggedBackend.for_model(half, 0) is not None
    monkeypatch.setattr(batching.PackedStep, "commit", lambda self, new_tokens: None)
    assert batching.RaggedBackend.for_model(load_model("tiny-qwen3", dtype="bfloat16").model, 0) is None


def test_half_precision_groups_read_their_prefix_in_float32_made_once_and_decode_the_same() -> None:
    """bfloat16 decode attends to a group's shared prompt in float32 (`attention_lse`); the copy is
    made once per prefix and layer while the group decodes (`SharedFloat`), not every step. Two
    groups of different prompts decode at once: every step's logits must equal, bit for bit, those
    of the same steps with the prefix converted at each use (the reference: attention_lse's own
    conversion), and each group must read its own prefix."""
    half = load_model("tiny-qwen3", dtype="bfloat16").model

    class ConvertEachUse(batching.SharedFloat):
        def of(self, layer: int, base: Any) -> Any:
            return base

    def decode(shared: batching.SharedFloat) -> tuple[list[Any], list[int]]:
        backend = batching.RaggedBackend.for_model(half, 0)
        assert backend is not None
        backend.shared = shared
        gen = torch.Generator().manual_seed(0)
        a, b = (torch.randint(0, 5000, (40,), generator=gen).tolist() for _ in range(2))
        sources = [batching.SequenceKV(8), batching.SequenceKV(8)]
        with torch.inference_mode():
            backend.run([(sources[0], a), (sources[1], b)])
            rows = []
            for source, n in ((sources[0], 3), (sources[1], 2)):
                for _ in range(n):
                    kv = batching.SequenceKV(8)
                    kv.copy_prefix(source, 40, share=True)
                    rows.append(kv)
            logits, held = [], []
            for step in range(4):
                toks = [[(7 * i + 11 * step) % 5000] for i in range(len(rows))]
                logits.append(backend.run(list(zip(rows, toks, strict=True))))
                held.append(len(shared.entries))
            backend.run([(sources[0], [1])])  # the groups stop decoding: their copies are dropped
            held.append(len(shared.entries))
        return logits, held

    memo, made = batching.SharedFloat(), []

    def counting(layer: int, base: Any) -> Any:
        key = (layer, base[0].data_ptr(), base[0].shape[2])
        if key not in memo.entries:
            made.append(key)
        return batching.SharedFloat.of(memo, layer, base)

    memo.of = counting  # type: ignore[method-assign]
    got, held = decode(memo)
    want, _ = decode(ConvertEachUse())
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    layers = half.config.num_hidden_layers
    assert len(made) == 2 * layers and held == [2 * layers] * 4 + [0]  # two prefixes a layer, made once, then freed


def test_within_rounding_is_exact_in_float32_and_loose_only_on_tail_ids_in_half_precision() -> None:
    want = torch.log_softmax(torch.tensor([[4.0, 2.0, 0.0, -8.0]]), -1)
    tail = want.clone()
    tail[0, 3] += 0.5  # an id with probability ~1e-5 moves half a nat
    head = want.clone()
    head[0, 0] += 0.5  # the likeliest id moves half a nat
    assert batching.within_rounding(want + 5e-4, want, torch.float32)
    assert not batching.within_rounding(tail, want, torch.float32)
    assert batching.within_rounding(tail, want, torch.bfloat16)
    assert not batching.within_rounding(head, want, torch.bfloat16)


def test_auto_dtype_is_float32_where_half_precision_is_emulated(monkeypatch: Any) -> None:
    from dagent.engine import models

    monkeypatch.setattr(models, "native_half_precision", lambda dtype: False)
    assert _dtype("auto", "bfloat16") == torch.float32 and _dtype("bfloat16", "bfloat16") == torch.bfloat16
    monkeypatch.setattr(models, "native_half_precision", lambda dtype: True)
    assert _dtype("auto", "bfloat16") == torch.bfloat16
    assert _dtype("auto", None) == torch.float32


def test_concurrent_streams_over_http_carry_each_requests_own_tokens(engine: LocalEngine) -> None:
    uvicorn, httpx = pytest.importorskip("uvicorn"), pytest.importorskip("httpx")
    from dagent.engine.server import create_app
    from dagent.serving import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(engine, served_model_name="tiny-qwen3"), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}/v1/chat/completions"
    bodies = [
        {
            "messages": [{"role": "user", "content": "Hello " * (1 + 30 * i)}],
            "max_tokens": 16,
            "seed": i,
            "temperature": 0.9,
            "logprobs": True,
            "return_token_ids": True,
        }
        for i in range(4)
    ]
    try:
        while not server.started:
            time.sleep(0.02)
        whole = [httpx.post(base, json=b, timeout=60).json() for b in bodies]
        streamed: list[Any] = [None] * 4

        def stream(i: int) -> None:
            ids, lps = [], []
            with httpx.stream("POST", base, json={**bodies[i], "stream": True}, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        choice = json.loads(line[6:])["choices"][0]
                        ids += choice.get("token_ids") or []
                        lps += [e["logprob"] for e in (choice.get("logprobs") or {}).get("content", [])]
            streamed[i] = (ids, lps)

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for body, (ids, lps) in zip(whole, streamed, strict=True):
            assert ids == body["choices"][0]["token_ids"]
            want = [e["logprob"] for e in body["choices"][0]["logprobs"]["content"]]
            assert lps == pytest.approx(want, abs=TOL)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
