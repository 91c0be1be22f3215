"""`flow model import`: a GGUF file becomes a Hugging Face folder that computes what the GGUF
model computes, written once, refused clearly when the file is not a model."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from flows.cli import app
from pipeline.model_import import ImportConfig, ModelImportError, import_gguf, packaged_gguf
from tests.conftest import require_real_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }
]


def test_the_imported_folder_computes_what_the_gguf_model_computes(smollm2):
    """Loaded back by plain transformers, the folder gives the GGUF model's logits and greedy
    tokens on a tool-use conversation it never saw (not the import's own probe)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = packaged_gguf()
    record = json.loads((smollm2 / "import.json").read_text())
    assert record["architecture"] == "LlamaForCausalLM" and record["parameters"] > 100e6
    assert record["max_abs_logit_diff"] <= 1e-5 and record["chat_template"]
    ref = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=torch.float32
    ).eval()
    ref_tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    got = AutoModelForCausalLM.from_pretrained(str(smollm2)).eval()
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    assert "quantization_config" not in got.config.to_dict()
    messages = [
        {"role": "user", "content": "What is 62 times 59?"},
        {"role": "assistant", "content": '<tool_call>\n{"name": "python", "arguments": '
         '{"code": "print(62 * 59)"}}\n</tool_call>'},
        {"role": "tool", "content": "3658"},
    ]  # fmt: skip
    ids = _ids(tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True))
    assert ids == _ids(
        ref_tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True)
    )
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(got(x).logits, ref(x).logits)
        kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": tok.eos_token_id}
        assert torch.equal(got.generate(x, **kw), ref.generate(x, **kw))
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"  # the chat's stop


def _ids(x):
    return x["input_ids"] if hasattr(x, "keys") else x


def test_a_rerun_finds_the_import_and_writes_nothing(smollm2):
    weights = smollm2 / "model.safetensors"
    before = weights.stat().st_mtime_ns
    res = CliRunner().invoke(app, ["model", "import", "--out", str(smollm2)])
    assert res.exit_code == 0, res.output
    assert "nothing to do" in res.output and weights.stat().st_mtime_ns == before


def test_what_is_not_a_gguf_model_is_refused_and_nothing_is_written(tmp_path):
    require_real_model()
    lake = tmp_path / "lake"
    res = CliRunner().invoke(app, ["model", "import", str(tmp_path / "x.bin"), "--lake", str(lake)])
    assert res.exit_code == 2 and "not a .gguf file" in res.output
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    res = CliRunner().invoke(app, ["model", "import", str(bogus), "--lake", str(lake)])
    assert res.exit_code == 2 and "could not read" in res.output, res.output
    assert not (lake / "models").exists() or not any((lake / "models").iterdir())
    with pytest.raises(ModelImportError, match="no GGUF file"):
        import_gguf(ImportConfig(gguf=str(tmp_path / "missing.gguf")), tmp_path / "m")
