"""`python -m dagent.engine --model tiny-qwen3 --port 8000`: serve a model like vLLM would.

A stand-in until `dagent engine serve` is wired to `dagent.engine.server.serve`. Sampling
defaults are deliberately not options: they come from `dagent.core.sampling.DEFAULT_SAMPLING`, which
the trainer reads too (F05).
"""

from __future__ import annotations

import argparse
import sys

from dagent.engine.server import serve
from dagent.errors import DagentError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dagent.engine", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="tiny-qwen3", help="tiny-qwen3, tiny-qwen3.5, smollm2-135m, or a local HF model directory"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None, help="name clients send (default: --model)")
    parser.add_argument(
        "--logprobs-mode",
        default="raw_logprobs",
        choices=["raw_logprobs", "processed_logprobs"],
        help="raw: log-softmax of the logits (vLLM's default); processed: after temperature and top-k/top-p",
    )
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="auto: the config's, or float32 where this CPU has no native bfloat16/float16",
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=16, help="concurrent requests batched into each forward pass (vLLM's name)"
    )
    parser.add_argument(
        "--prefix-cache-gib",
        type=float,
        default=1.0,
        help="memory for reusing finished requests' prompt prefixes (0: off)",
    )
    parser.add_argument(
        "--no-pack-weights",
        dest="pack_weights",
        action="store_false",
        help="serve half-precision linear layers with PyTorch's plain kernel instead of "
        "weights pre-packed for oneDNN (dagent.engine.packing)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is best on a busy small machine)",
    )
    args = parser.parse_args(argv)

    try:
        serve(
            args.model,
            args.host,
            args.port,
            served_model_name=args.served_model_name,
            logprobs_mode=args.logprobs_mode,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            threads=args.threads,
            max_num_seqs=args.max_num_seqs,
            prefix_cache_gib=args.prefix_cache_gib,
            pack_weights=args.pack_weights,
        )
    except KeyboardInterrupt:
        return 130
    except DagentError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
