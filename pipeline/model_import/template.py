"""A ChatML chat template that can declare tools, for models whose own cannot (SmolLM2's template
renders ``<|im_start|>role\\ncontent<|im_end|>`` and nothing else: no ``tools``, no calls).

The extension is Hermes' convention as Qwen2.5's ChatML template writes it: the tool signatures
in ``<tools></tools>`` at the end of the system turn, the assistant's calls as
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`` after its text. Everything else
is rendered as the model's own template renders it (its default system prompt, the ``tool``
role's turns), and ``extend`` checks that: a conversation without tools renders to the same text
under both templates, or nothing is extended."""

from __future__ import annotations

import json

TOOLS_BLOCK = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_END = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
HERMES_CHATML = (
    "{%- macro tools_block() -%}"
    "{{- TOOLS_BLOCK }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- TOOLS_END }}"
    "{%- endmacro -%}"
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' and (DEFAULT_SYSTEM or tools) %}"
    "{{- '<|im_start|>system\\n' + DEFAULT_SYSTEM }}"
    "{%- if tools %}{{- tools_block() }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- if message['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + message['content'] }}"
    "{%- if tools and loop.first %}{{- tools_block() }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set call = call['function'] if call.get('function') else call %}"
    "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call['name'] + '\", \"arguments\": ' }}"
    "{%- if call['arguments'] is string %}{{- call['arguments'] }}"
    "{%- else %}{{- call['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PROBE_TOOL = {
    "type": "function",
    "function": {"name": "probe_tool", "description": "d", "parameters": {"type": "object"}},
}
CONVERSATION = [
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
    {"role": "tool", "content": "t"},
    {"role": "assistant", "content": "b"},
]


def declares_tools(tokenizer) -> bool:
    """Whether the tokenizer's template writes a ``tools`` list into the prompt."""
    render = tokenizer.apply_chat_template
    with_tools = render(CONVERSATION[:1], tools=[PROBE_TOOL], tokenize=False)
    return "probe_tool" in with_tools


def _default_system(tokenizer) -> str | None:
    """The system prompt a ChatML template writes when the conversation has none ("" if none,
    None if the template is not ChatML)."""
    text = tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False)
    if not text.startswith("<|im_start|>"):
        return None
    head = "<|im_start|>system\n"
    if text.startswith(head):
        return text[len(head) : text.index("<|im_end|>")]
    return "" if text.startswith("<|im_start|>user\n") else None


def hermes_template(default_system: str) -> str:
    """The ChatML template with Hermes tool declarations and calls, ``default_system`` written
    when a conversation has no system turn."""
    return (
        HERMES_CHATML.replace("DEFAULT_SYSTEM", json.dumps(default_system))
        .replace("TOOLS_BLOCK", json.dumps(TOOLS_BLOCK))
        .replace("TOOLS_END", json.dumps(TOOLS_END))
    )


def extend(tokenizer) -> str | None:
    """A template for ``tokenizer`` that declares tools the Hermes way, or None when its own
    already does, or it is not ChatML, or the extension would render a tool-free conversation
    differently from the original (then nothing is changed)."""
    if declares_tools(tokenizer):
        return None
    system = _default_system(tokenizer)
    if system is None:
        return None
    original = tokenizer.chat_template
    template = hermes_template(system)
    try:
        tokenizer.chat_template = template
        ours = [
            tokenizer.apply_chat_template(CONVERSATION[:n], tokenize=False, add_generation_prompt=g)
            for n in (1, 2, 4)
            for g in (False, True)
        ]
        tokenizer.chat_template = original
        theirs = [
            tokenizer.apply_chat_template(CONVERSATION[:n], tokenize=False, add_generation_prompt=g)
            for n in (1, 2, 4)
            for g in (False, True)
        ]
    finally:
        tokenizer.chat_template = original
    return template if ours == theirs else None
