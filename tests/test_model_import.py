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
    # a conversation without tools renders as the GGUF's own template renders it
    ids = _ids(tok.apply_chat_template(messages, add_generation_prompt=True))
    assert ids == _ids(ref_tok.apply_chat_template(messages, add_generation_prompt=True))
    x = torch.tensor(
        [_ids(tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True))]
    )
    with torch.no_grad():
        assert torch.equal(got(x).logits, ref(x).logits)
        kw = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": tok.eos_token_id}
        assert torch.equal(got.generate(x, **kw), ref.generate(x, **kw))
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"  # the chat's stop


def test_the_imported_template_declares_tools_and_sft_renders_it_token_for_token(smollm2):
    """SmolLM2's own template has no tools: the import extends it the Hermes way (tools in the
    system turn, calls as <tool_call> JSON). The agent loop's prompt and SFT's rendering of a
    recorded tool conversation are exactly what apply_chat_template renders; the loop reads the
    policy's <tool_call> text back as the call; <|im_end|> stops a turn."""
    from transformers import AutoTokenizer

    from pipeline.rollout.agent import PYTHON_TOOL, AgentConfig, head_messages, parse_calls
    from pipeline.rollout.render import render

    record = json.loads((smollm2 / "import.json").read_text())
    assert record["tools_declared_by"] == "hermes extension"
    assert "tools" not in record["original_chat_template"]
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    agent = AgentConfig()
    call = {"name": "python", "arguments": {"code": "print(62 * 59)"}}
    recorded = [
        {"role": "user", "content": "What is 62 times 59?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "name": "python", "arguments": json.dumps(call["arguments"])}]},
        {"role": "tool", "content": "3658\n", "tool_call_id": "c0"},
        {"role": "assistant", "content": "The answer is \\boxed{3658}."},
    ]  # fmt: skip
    as_template = [
        *head_messages(recorded[0]["content"], agent.system_prompt),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": call}],
        },
        *recorded[2:],
    ]
    full = tok.apply_chat_template(as_template, tools=[PYTHON_TOOL], tokenize=False)
    assert "<tools>" in full and '"name": "python"' in full.split("<|im_start|>user")[0]
    full = full[: full.rindex(tok.eos_token) + len(tok.eos_token)]
    prompt, ids, mask = render(tok, recorded, agent)
    assert prompt + ids == tok(full, add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(ids[-1]) == "<|im_end|>" and mask[-1] == 1
    own = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "<tool_call>" in own and "3658\n" not in own  # the tool's output is not trained
    first_turn = tok.decode(ids[: ids.index(tok.eos_token_id)])
    calls, bad = parse_calls(first_turn, "hermes")
    assert bad == 0 and calls[0]["name"] == "python"
    assert calls[0]["arguments"] == call["arguments"]


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
