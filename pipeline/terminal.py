"""Text from the data, made safe for a terminal: what a record holds is shown, never obeyed.

Data can contain escape sequences (ESC, CSI, OSC hyperlinks), other control characters and
bidirectional overrides, and text that Rich would read as markup (``[/asy]`` in MATH problems,
``[link=…]``). ``clean`` makes control characters visible as ``\\xNN`` escapes; ``esc`` also
escapes Rich markup, for text interpolated into a markup string.
"""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls but tab and newline, DEL, C1 controls, bidi marks (ALM, LRM, RLM), line and
# paragraph separators, bidi embeddings/overrides/isolates
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: object) -> str:
    return _UNSAFE.sub(_visible, str(text))


def esc(text: object) -> str:
    """For ``console.print(f"… {esc(value)} …")``: no markup, no control characters."""
    return escape(clean(text))


def plain(value: object) -> str:
    """A mapping as people write it ("easy 0.3, medium 0.5"), not as Python prints it."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {plain(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(map(plain, value))
    return str(value)
