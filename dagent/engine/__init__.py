"""Engines: the local engine that answers like vLLM (token ids, logprobs) with continuous batching
(`server`, `service`, `generation`, `scheduler`, `batching`, `packing`), its models and tokenizers
(`models`, `tokenizer`), its wire format (`openai_wire`), the engine in-process for a trainer
(`inprocess`) and engines as child processes, local or vLLM (`process`).
"""
