"""An SSML document as blocks for the text pipeline (``prepare_text``).

:func:`voicelane.core.ssml.read_ssml` reads the document (hardened; a 400 naming line and
column when it cannot) into items in reading order; here they become
:class:`~voicelane.core.text_blocks.Block` objects: consecutive speech with one voicing is a
block, a ``break`` ends a block with its exact pause, ``</s>`` and ``</p>`` end one (``</p>``
a paragraph), a ``mark`` is a run of its own, placed between the words around it. Line breaks in the
document are layout: sentences end at ``</s>``, ``</p>`` and punctuation, never at a line end.
"""

from __future__ import annotations

from voicelane.core.ssml import Boundary, Break, Mark, Speech, SsmlWarning, read_ssml
from voicelane.core.text_blocks import Block, Run
from voicelane.core.text_map import Mapped, translate

__all__ = ["ssml_blocks"]


def ssml_blocks(source: str, *, field: str = "text") -> tuple[list[Block], tuple[SsmlWarning, ...]]:
    """The blocks of the SSML document ``source`` and what was ignored in it (errors name
    ``field``)."""
    document = read_ssml(source, field=field)
    blocks: list[Block] = []
    current = Block()
    empty = Mapped("", (), len(source))

    def flush() -> Block:
        blocks.append(current)
        return Block(voicing=current.voicing)

    for item in document.items:
        if isinstance(item, Speech):
            if item.voicing != current.voicing:
                if current.runs:
                    current = flush()
                current.voicing = item.voicing
            phonemes = item.phonemes.ipa if item.phonemes is not None else None
            mapped = _one_line(item.mapped)
            current.runs.append(Run(mapped, verbatim=item.verbatim, phonemes=phonemes))
        elif isinstance(item, Break):
            current.pause_after_ms = (current.pause_after_ms or 0) + item.time_ms
            current = flush()
        elif isinstance(item, Mark):
            current.runs.append(Run(empty, mark=item.name))
        elif isinstance(item, Boundary):
            if item.kind == "paragraph":
                current.paragraph_end = True
            current = flush()
    if current.runs or current.pause_after_ms is not None or current.paragraph_end:
        blocks.append(current)
    if blocks:
        blocks[-1].paragraph_end = True
    return blocks, document.warnings


def _one_line(mapped: Mapped) -> Mapped:
    """Line breaks in a document are layout, not sentence ends (those come from ``<s>``,
    ``<p>`` and punctuation): each becomes a space."""
    if "\n" not in mapped.text and "\r" not in mapped.text:
        return mapped
    return mapped.then(translate(mapped.text, _LINE_BREAKS))


_LINE_BREAKS = {"\n": " ", "\r": " "}
