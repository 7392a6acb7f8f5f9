"""User-controlled text as Markdown the Web UI shows literally.

The Temporal Web UI renders a run's summary and current details, and each activity's
summary, as Markdown with HTML. Tool arguments, prompts, tool names and call ids come from
users and models: written as they are, `[Approve here](http://…)` becomes a live link and
`<img onerror=…>` a real element. Wrapping them in backticks does not help (a backtick in
the text closes the code span). `literal` escapes every character Markdown gives a meaning
(raw HTML included), so the text renders exactly as it was written.
"""

from __future__ import annotations

__all__ = ["literal"]

_ESCAPED = str.maketrans(
    {
        **{c: "\\" + c for c in "\\`*_{}[]()#+-.!|~:<>&"},
        "\r": " ",
        "\n": " ",
    }
)
"""Every ASCII punctuation character Markdown gives a meaning, escaped with a backslash
(CommonMark's rule: `\\<` is a literal `<`, so no tag opens; `\\&` no entity). HTML
entities would not do: the Web UI shows `&lt;` as it is. Quotes are left alone: the UI
keeps the backslash before one (and curls the quote either way)."""


def literal(text: str) -> str:
    """`text` escaped for Markdown and HTML, on one line."""
    return text.translate(_ESCAPED)
