"""dagent: train and evaluate LLM data agents with reinforcement learning.

Data flows one way: task -> sandbox -> agent/engine -> capture -> trajectory -> grade -> reward ->
trainer or report. The package is built in layers, lowest first. A module imports only from its
own layer or a lower one, never in a circle (tests/test_layers.py reads the import graph and holds
the code to this list):

    1. errors clock jobargs provenance failures serving   what every layer uses
    2. core          the task, the suite, reward, sampling, the outcome vocabulary (pure)
    3. grading       single values, multi-field answers, the dispatch, settling an episode (pure)
    4. trajectory    captured calls, linking and drift, roots, the gate, the audit, exports (pure)
    5. sandbox       where an agent works: local bubblewrap, E2B, HF sandboxes, staging, the image
    6. tools         the white-box tool surface, its implementations, the episode state machine
    7. capture       the proxy that records an engine's own token ids, logprobs and loss masks
    8. engine        the local engine (batching, the model on the main thread), vLLM processes
    9. launch        HF Jobs, Slurm and Spaces: ports, submission, deployment
   10. harness       the agent protocol and the step-cap contract, the episode skeleton, the
                     oracle, the tool loop, the captured-loop agent, opencode and pi
   11. suites        task sources (local, Hub), import, check, push
   12. harbor        the suite as a Harbor catalog, Harbor run without Docker
   13. envs          the white-box and black-box environment servers, their client, TRL's session
   14. train         SFT, white-box and black-box GRPO, preflight, the health watch, checkpoints
   15. eval          experiments, the agent stack, scoring, reports, results on the Hub, regrade
   16. demo          the demo's pure views and per-tab sessions (app.py is its Gradio shell)
   17. cli           the `dagent` command, `dagent reproduce` with its receipts

Imports stand at the top of a module. Inside a function only a heavy optional library (torch,
transformers, trl, vllm, gradio, ...) is imported, or a dagent module that brings one with it, so a
base install and the command line start without them. The pure core (layers 2-4) imports no adapter.
"""

__version__ = "0.1.0"
