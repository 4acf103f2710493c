"""A Griffe extension for the API reference: the package's docstrings are reStructuredText-ish
prose that the reference renders as Markdown, so two of their forms are translated first.

- A doctest (lines from ``>>>`` with their ``...`` continuations) becomes a fenced Python console
  block, its ``# doctest:`` directives dropped (Markdown would read ``>>>`` as quotes).
- A paragraph ending in ``::`` before an indented literal block ends in ``:`` (the block is
  already code in Markdown).
"""

from __future__ import annotations

import re

from griffe import Extension, Object

DIRECTIVE = re.compile(r"\s*# doctest:.*$")
LITERAL_INTRODUCTION = re.compile(r"::\n(?=\n[ \t]+\S)")


def markdown_docstring(text: str) -> str:
    lines, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith((">>>", "...")) and (block or line.startswith(">>>")):
            block.append(DIRECTIVE.sub("", line))
            continue
        if block:
            lines += ["```pycon", *block, "```"]
            block = []
        lines.append(line)
    return LITERAL_INTRODUCTION.sub(":\n", "\n".join(lines[:-1]))


class MarkdownDocstrings(Extension):
    def on_object(self, *, obj: Object, **kwargs) -> None:
        # an object reached twice (through an alias) is translated once
        if obj.docstring is not None and "```pycon" not in obj.docstring.value:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
