"""The judge's three-part output, read tolerantly, with a reason whenever it cannot be.

``<think>…</think><critique>…</critique><score>0.7</score>``: tags in any case, a missing
closing tag (the section runs to the next tag or the end), a score written ``0.7``, ``7/10`` or
``70%``. The score taken is the last ``<score>`` (a judge that quotes the format inside its
reasoning is not believed there), then a trailing ``score: x`` line. A score outside [0, 1], or
none at all, fails the parse with the reason: a failed parse is recorded as such, never read as
a 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

TAGS = ("think", "critique", "score")
MAX_CHARS = 32_000  # a judge that rambles is cut here (and said to be)
_OPEN = re.compile(r"<\s*(think|critique|score)\s*>", re.I)
_CLOSE = {t: re.compile(rf"<\s*/\s*{t}\s*>", re.I) for t in TAGS}
_NUMBER = re.compile(
    r"^\s*\**\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:(/)\s*(\d+(?:\.\d*)?)|(%))?\s*\**\s*$"
)
_LOOSE = re.compile(r"(?im)^\W*score\W{0,3}[:=]\s*(.+?)\s*$")


@dataclass(frozen=True)
class Parsed:
    think: str | None
    critique: str | None
    score: float | None  # in [0, 1]; None when the parse failed
    status: str  # ok | partial (a score, but a part missing or unclosed) | failed
    reason: str | None  # what was missing or wrong (None when ok)


def score_value(text: str) -> tuple[float | None, str | None]:
    """A score in [0, 1] from ``0.7``, ``7/10`` or ``70%``; (None, reason) otherwise."""
    m = _NUMBER.match(text)
    if not m:
        return None, f"score {text.strip()[:40]!r} is not a number"
    x = float(m.group(1))
    if m.group(2):
        den = float(m.group(3))
        if den <= 0:
            return None, f"score {text.strip()[:40]!r} divides by zero"
        x /= den
    elif m.group(4):
        x /= 100
    if not math.isfinite(x) or not 0 <= x <= 1:
        return None, f"score {text.strip()[:40]!r} is outside [0, 1]"
    return x, None


def _section(text: str, tag: str, last: bool) -> tuple[str, bool] | None:
    """(content, closed) of the first (``think``) or last (``critique``, ``score``) ``tag``: up
    to its closing tag if one follows (tags quoted inside stay in it), else to the next tag."""
    opens = [m for m in _OPEN.finditer(text) if m.group(1).lower() == tag]
    if not opens:
        return None
    m = opens[-1] if last else opens[0]
    close = _CLOSE[tag].search(text, m.end())
    if close:
        return text[m.end() : close.start()].strip(), True
    nxt = _OPEN.search(text, m.end())
    return text[m.end() : nxt.start() if nxt else len(text)].strip(), False


def parse(text: str | None) -> Parsed:
    if not text or not text.strip():
        return Parsed(None, None, None, "failed", "empty judge output")
    problems = []
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS]
        problems.append(f"output cut at {MAX_CHARS} characters")
    think_s, critique_s = _section(text, "think", False), _section(text, "critique", True)
    think, critique = (think_s or (None,))[0], (critique_s or (None,))[0]
    for tag, sec in (("think", think_s), ("critique", critique_s)):
        if sec is None:
            problems.append(f"no <{tag}>")
        elif not sec[1]:
            problems.append(f"<{tag}> not closed")
    score, why = None, None
    score_s = _section(text, "score", True)
    if score_s is not None:
        score, why = score_value(score_s[0])
        if score is not None and not score_s[1]:
            problems.append("<score> not closed")
    else:
        loose = _LOOSE.findall(text)
        if loose:
            score, why = score_value(loose[-1])
            if score is not None:
                problems.append("no <score> tag (a 'score:' line)")
        else:
            why = "no <score>"
    if score is None:
        return Parsed(think, critique, None, "failed", "; ".join([why or "no score", *problems]))
    return Parsed(
        think, critique, score, "partial" if problems else "ok", "; ".join(problems) or None
    )
