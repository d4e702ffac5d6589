"""Benchmark: N black-box rollouts (real opencode, capture, local sandbox) and their figures.

    python benchmarks/rollouts.py --n 20                      # the scripted policy (see below)
    python benchmarks/rollouts.py --n 20 --template qwen3_5   # the same, Qwen3.5's thinking template
    python benchmarks/rollouts.py --n 8 --tool-json compact   # tool calls written without JSON spaces
    python benchmarks/rollouts.py --n 20 --policy tiny-qwen3  # the random tiny Qwen3, real weights
    python benchmarks/rollouts.py --n 20 --policy steered     # the tiny Qwen3 steered to the script
    python benchmarks/rollouts.py --suite ~/.cache/dagent/suite --split test --n 20
    python benchmarks/rollouts.py --harness pi --policy runs/lr/sft/final --suite ~/.cache/dagent/suite --split \
        train:easy --n 12

Prints per rollout: outcome, turns (agent / all), drift, transitions, wall time; then turns per
rollout, drift mean/max, fork and realign fractions, samples per rollout and wall time p50/p95;
then the FORK POLICY over the same rollouts: each agent chain converted by TRL's own
`_chain_to_sequences` at fork threshold 0 (what `lossless_capture=True`, TRL's default, forces) and
at the recipe's 1024: training samples per rollout, clean / realign / fork fractions of the
transitions, and trained tokens.

POLICIES. `tiny-qwen3` (and `smollm2-135m`) are real networks served by the local engine; the
random tiny Qwen3 emits noise up to its token cap, so opencode stops after ONE agent turn.
`scripted` is NOT a model: `ScriptedPolicy` is a language-model stand-in whose logits put all mass
on the next token of a script chosen from the prompt (title call -> a title; no tool result yet ->
a `bash` call that looks at the table; one tool result -> a `bash` call that writes
`tail -n +2 t.csv | wc -l` to /workdir/answer.txt; then a closing sentence). It runs inside the
REAL local engine (real Qwen3 tokenizer and chat template, real sampling at the shared
temperature, real hermes tool-call parsing, logprobs from its logits) behind the SAME capture
proxy, so opencode, the sandbox and the token chain are exercised for real over several agent
turns. Its answer is right only for "how many data rows" tasks; elsewhere it is graded wrong.
`steered` is the real tiny Qwen3 network (`SteeredPolicy`): its forward pass on every token, plus
a bias towards the same script, so the turns are the script's and the logprobs the network's
steered logits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TITLE = "Counting rows in a CSV table"
LOOK = {"command": "head -5 /workdir/input/*.csv", "description": "Look at the input table"}
WRITE = {
    "command": "tail -n +2 /workdir/input/*.csv | wc -l > /workdir/answer.txt",
    "description": "Count the data rows into the answer file",
}
DONE = "I counted the data rows and wrote the count to /workdir/answer.txt."


#: How the scripted policy spaces its JSON tool calls: `spaced` as json.dumps (and the chat template's
#: re-rendering) writes them, `compact` without spaces as some models do: the harness sends the parsed
#: call back and the template re-renders it spaced, so the held answer drifts in its tail.
JSON_STYLE = {"style": "spaced"}


def tool_call(arguments: dict[str, str], xml: bool = False) -> str:
    """A tool call as the model family writes one: Qwen3's hermes JSON (json.dumps spacing, or
    compact under `--tool-json compact`), or Qwen3.5's XML form (`<function=bash><parameter=...>`)."""
    if xml:
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
        return f"<tool_call>\n<function=bash>\n{params}</function>\n</tool_call>"
    separators = (",", ":") if JSON_STYLE["style"] == "compact" else None
    return (
        "<tool_call>\n" + json.dumps({"name": "bash", "arguments": arguments}, separators=separators) + "\n</tool_call>"
    )


def script_for(prompt: str) -> str:
    """What the scripted policy says, given the rendered prompt (see the module docstring). Under a
    thinking template (the prompt ends in `<think>\n`) it first closes an empty thought, and writes
    tool calls in Qwen3.5's XML form, as that model family does."""
    thinking = prompt.endswith("<think>\n")
    prefix = "\n</think>\n\n" if thinking else ""
    if "You are a title generator" in prompt:
        return prefix + TITLE
    done = prompt.count("<tool_response>")
    return prefix + (tool_call(LOOK, thinking) if done == 0 else tool_call(WRITE, thinking) if done == 1 else DONE)


def ScriptedPolicy(tokenizer: Any, vocab: int, stop_id: int) -> Any:  # noqa: N802 - a policy, named as one
    """A causal-LM stand-in for `dagent.engine.generation.LocalEngine`: logits put all mass (30.0
    over zeros) on the next token of `script_for(prompt)`, then on the stop token (the warm start's
    replaying policy, `dagent.train.blackbox.harness_demos.ReplayPolicy`, with this benchmark's script)."""
    from dagent.train.blackbox.harness_demos import ReplayPolicy

    return ReplayPolicy(tokenizer, vocab, stop_id, script_for)


class SteeredPolicy:
    """The REAL tiny Qwen3 (seeded random weights, `dagent.engine.models`) steered towards
    `script_for(prompt)`: its forward pass runs on every token and a bias of `bias` is added to the
    script's next token (then the stop token). The engine's logprobs are those of the steered
    logits (the engine's raw mode), so they are finite, model-dependent and near 0 on the script."""

    def __init__(self, model: Any, tokenizer: Any, stop_id: int, bias: float = 100.0, script: Any = None) -> None:
        self.model, self.tokenizer, self.stop_id, self.bias = model, tokenizer, stop_id, bias
        self.script = script or script_for  # prompt text -> what to say
        self.config = None  # not a PreTrainedModel: the engine serves it one sequence at a time

    def __call__(self, input_ids: Any, cache: Any = None, **kw: Any) -> Any:
        if cache is None:
            text = self.tokenizer.decode(input_ids[0].tolist())
            script = self.tokenizer.encode(self.script(text), add_special_tokens=False) + [self.stop_id]
            inner, pos = None, 0
        else:
            inner, script, pos = cache
            pos += 1
        out = self.model(input_ids=input_ids, cache=inner, **kw)
        logits = out.logits.clone()
        logits[0, -1, script[min(pos, len(script) - 1)]] += self.bias
        return SimpleNamespace(logits=logits, cache=(out.cache, script, pos))


class EngineThread:
    """A uvicorn server for an engine app on a free port, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        from dagent.serving import ThreadedServer

        self._server = ThreadedServer(app).start()
        self.port, self.url = self._server.port, self._server.url

    def stop(self) -> None:
        self._server.stop()


def scripted_engine(variant: str = "qwen3", context: int = 32_768) -> EngineThread:
    """The real local engine over `ScriptedPolicy` and a real Qwen tokenizer and chat template
    (`qwen3`, or `qwen3_5` with its thinking template), served as `scripted`."""
    from dagent.engine.generation import LocalEngine
    from dagent.engine.server import create_app
    from dagent.engine.tokenizer import VARIANTS, qwen3_tokenizer

    tokenizer = qwen3_tokenizer(variant)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = LocalEngine(
        ScriptedPolicy(tokenizer, VARIANTS[variant].model_vocab_size, stop),
        tokenizer,
        eos_token_ids=(stop,),
        max_model_len=context,
        name="scripted",
    )
    return EngineThread(create_app(engine, served_model_name="scripted"))


def steered_engine(context: int = 32_768) -> EngineThread:
    """The real local engine over the real tiny Qwen3 steered by `SteeredPolicy` (real Qwen3
    tokenizer and chat template), served as `tiny-qwen3-steered`. The context is opencode's
    (its prompts pass the tiny model's nominal 4,096 positions; rotary positions extend)."""
    from dagent.engine.generation import LocalEngine
    from dagent.engine.models import load_model
    from dagent.engine.server import create_app

    loaded = load_model("tiny-qwen3")
    stop = loaded.tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = LocalEngine(
        SteeredPolicy(loaded.model, loaded.tokenizer, stop),
        loaded.tokenizer,
        eos_token_ids=(stop,),
        max_model_len=context,
        name="tiny-qwen3-steered",
    )
    return EngineThread(create_app(engine, served_model_name="tiny-qwen3-steered"))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


def main(args: argparse.Namespace) -> int:
    from dagent.engine.process import LocalEngineProcess, served_model
    from dagent.harness.opencode import OpencodeConfig
    from dagent.runtime.blackbox import BlackBoxRuntime
    from dagent.suites.sources import load_tasks

    if args.suite:
        suite = load_tasks(args.suite)
    else:  # the tests' synthetic suite: a real CSV, four tasks per split
        from tests.factories import write_suite

        scratch = tempfile.TemporaryDirectory(prefix="dagent-bench-")
        suite = load_tasks(write_suite(Path(scratch.name) / "suite"))
    JSON_STYLE["style"] = args.tool_json
    if args.policy == "scripted":
        engine = scripted_engine(args.template)
    elif args.policy == "steered":
        engine = steered_engine()
    else:
        engine = LocalEngineProcess(args.policy).start()
    rows, started = [], time.monotonic()
    try:
        model = served_model(engine.url)
        from dagent.harness.pi import PiConfig

        runtime = BlackBoxRuntime(
            suite,
            engine.url,
            model=model,
            timeout_s=args.timeout,
            harness=args.harness,
            opencode=OpencodeConfig(model=model, max_output_tokens=args.max_output_tokens),
            pi=PiConfig(model=model, max_output_tokens=args.max_output_tokens, context_tokens=args.context),
        )
        with runtime:
            print(runtime.describe(), flush=True)
            n_tasks = len(suite.tasks(args.split))
            for k in range(args.n):
                r = runtime.run_rollout(args.split, k % n_tasks)
                g = r.gate
                rows.append(r)
                print(
                    f"{k:>3} {r.task_id:<12} {r.outcome:<9} {str(r.cause or ''):<17} turns {g.agent_turns}/"
                    f"{g.turns}  drift mean {g.drift_mean:6.1f} max {g.drift_max:>4}  forks {g.fork_frac:.2f} "
                    f"realign {g.realign_frac:.2f}  tier {g.tier:<9} wall {r.wall_s:6.1f}s",
                    flush=True,
                )
    finally:
        engine.stop()
    gates = [r.gate for r in rows]
    walls = [r.wall_s for r in rows]
    transitions = sum(max(g.agent_turns - 1, 0) for g in gates)
    label = (
        f"{args.policy}/{args.template}/{args.tool_json}" if args.policy == "scripted" else args.policy
    ) + f", {args.harness}"
    print(f"\n{len(rows)} rollouts ({label}) in {time.monotonic() - started:.0f}s")
    print(
        "outcomes: " + ", ".join(f"{o} {sum(r.outcome == o for r in rows)}" for o in ("correct", "wrong", "ungraded"))
    )
    print(
        f"turns per rollout: agent {statistics.mean(g.agent_turns for g in gates):.2f}, "
        f"all calls {statistics.mean(g.turns for g in gates):.2f} "
        f"(auxiliary roots {statistics.mean(g.auxiliary_roots_excluded for g in gates):.2f})"
    )
    print(
        f"drift over {transitions} transitions: mean {statistics.mean(g.drift_mean for g in gates):.2f} "
        f"max {max(g.drift_max for g in gates)}; fork_frac {statistics.mean(g.fork_frac for g in gates):.4f} "
        f"realign_frac {statistics.mean(g.realign_frac for g in gates):.4f}; samples per rollout "
        f"{statistics.mean(g.samples_per_rollout for g in gates):.2f}; tiers "
        + ", ".join(f"{t} {sum(g.tier == t for g in gates)}" for t in ("train", "eval_only", "reject"))
    )
    print(
        f"wall per rollout: mean {statistics.mean(walls):.1f}s p50 {pct(walls, 0.5):.1f}s "
        f"p95 {pct(walls, 0.95):.1f}s max {max(walls):.1f}s"
    )
    fork_policy(rows)
    return 0


def fork_policy(rows: list[Any], thresholds: tuple[int, ...] = (0, 1024)) -> None:
    """The same rollouts through TRL's conversion at each fork threshold (module docstring)."""
    from dagent.train.blackbox.rollouts import chain_sequences

    entries = [r.trace_entries() for r in rows if r.trajectory is not None and r.trajectory.agent_chain]
    if not entries:
        print("fork policy: no rollout has an agent chain")
        return
    print(f"\nfork policy over the same {len(entries)} rollouts (TRL's _chain_to_sequences):")
    for threshold in thresholds:
        samples, trained, tally = [], [], {"clean": 0.0, "realign": 0.0, "fork": 0.0, "transitions": 0.0}
        for e in entries:
            sequences, t = chain_sequences(e, threshold)
            samples.append(len(sequences))
            trained.append(sum(sum(s.completion_mask) for s in sequences))
            for k in tally:
                tally[k] += t.get(k, 0.0)
        n = max(tally["transitions"], 1.0)
        print(
            f"  threshold {threshold:>5}: samples per rollout {statistics.mean(samples):.2f}, transitions "
            f"{tally['transitions']:.0f} (clean {tally['clean'] / n:.2f}, realign {tally['realign'] / n:.2f}, fork "
            f"{tally['fork'] / n:.2f}), trained tokens per rollout {statistics.mean(trained):.1f}"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20, help="rollouts to run")
    p.add_argument("--policy", default="scripted", help="scripted, steered, tiny-qwen3 or smollm2-135m")
    p.add_argument(
        "--template",
        default="qwen3",
        choices=["qwen3", "qwen3_5"],
        help="the scripted policy's tokenizer and chat template",
    )
    p.add_argument("--suite", default=None, help="a suite (default: the synthetic one of the tests)")
    p.add_argument("--split", default="train")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per rollout")
    p.add_argument("--max-output-tokens", type=int, default=256)
    p.add_argument(
        "--tool-json",
        default="spaced",
        choices=["spaced", "compact"],
        help="the scripted policy's JSON spacing in tool calls (compact: re-rendered spaced, a tail drift)",
    )
    p.add_argument("--harness", default="opencode", choices=["opencode", "pi"], help="the agent that owns the loop")
    p.add_argument("--context", type=int, default=32_768, help="the context window pi is told the model has")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse()))
