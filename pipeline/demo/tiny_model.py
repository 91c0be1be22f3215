"""Build a tiny random-weight Qwen2 model and a byte-level BPE tokenizer with a ChatML chat
template that renders tool calls and tool results the Hermes/Qwen way, saved with
``save_pretrained``: it loads in transformers and in vLLM, offline. For tests and benchmarks.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'You can call tools.' }}"
    "\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools><|im_end|>\n"
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'system' %}"
    "{%- elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{%- elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{%- for c in m.get('tool_calls') or [] %}<tool_call>\n{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] if c['function']['arguments'] is string else c['function']['arguments'] | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

CORPUS = [
    "What is 12 times 7? Let me compute it with python. print(12 * 7) The answer is \\boxed{84}.",
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(1 + 2)"}}\n</tool_call>',
    "A train travels 60 km per hour for 3 hours. How far does it go? 180 km.",
    "def f(x):\n    return x * x\nprint(f(9))\n81",
    "0123456789 + - * / = ( ) [ ] { } \\boxed{} the answer is so we get therefore",
]


def build_tiny_model(
    out: str | Path,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 400,
    seed: int = 0,
    corpus: list[str] | None = None,
    split_digits: bool = False,
) -> Path:
    """Write a random Qwen2 (head_dim = hidden/heads >= 32 for vLLM's CPU kernels) and its
    tokenizer under ``out``; returns the folder. ``corpus``: texts to train the BPE on (the
    nano policy's own task texts give short sequences); default a small built-in one."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # split_digits: one token per digit, as Qwen's and Llama's tokenizers do (numbers are then
    # copied digit by digit, which a tiny model learns far sooner than a token per number)
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus or CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=SPECIAL[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    return out
