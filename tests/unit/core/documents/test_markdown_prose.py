"""Markdown → prose with markdown-it-py: front matter as metadata, headings as chapters,
code, raw HTML and footnotes not read."""

from __future__ import annotations

import pytest

from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.markdown_prose import markdown_document, split_front_matter
from voicelane.core.documents.model import DocumentLimits

LIMITS = DocumentLimits(max_chars=1_000_000)

SOURCE = """---
title: "A Field Guide"
author: Bea Birder
lang: en-US
keywords:
  - birds
---

A title page line.

# Owls

Owls hunt at night.[^n] See [the map](https://example.com/map.png).

<div class="ad">raw html block</div>

## Barn owls

They nest in *barns* and use `roosts`.

```python
print("code block")
```

    indented code

#### Not a chapter

- first item
- second item

| bird | call |
|------|------|
| owl  | hoot |

# Wrens

Small and loud. ![a wren](wren.png)

[^n]: A footnote that is not read.
"""


def test_front_matter_is_metadata_and_not_read() -> None:
    document = markdown_document(SOURCE, limits=LIMITS)
    assert (document.title, document.author, document.language) == (
        "A Field Guide",
        "Bea Birder",
        "en-US",
    )
    assert "Bea Birder" not in document.text
    assert document.text.startswith("A title page line.")


def test_prose_blocks_and_what_is_not_read() -> None:
    text = markdown_document(SOURCE, limits=LIMITS).text
    assert text.split("\n\n") == [
        "A title page line.",
        "Owls",
        "Owls hunt at night. See the map.",
        "Barn owls",
        "They nest in barns and use roosts.",
        "Not a chapter",
        "first item",
        "second item",
        "bird",
        "call",
        "owl",
        "hoot",
        "Wrens",
        "Small and loud.",
    ]


def test_headings_h1_to_h3_are_chapters() -> None:
    document = markdown_document(SOURCE, limits=LIMITS)
    assert [(c.title, c.level) for c in document.chapters] == [
        ("Owls", 1),
        ("Barn owls", 2),
        ("Wrens", 1),
    ]
    for chapter in document.chapters:
        assert document.text.startswith(chapter.title, chapter.start)


def test_without_front_matter_the_first_h1_is_the_title() -> None:
    document = markdown_document("Intro.\n\n## Sub\n\n# Main Title\n\nText.", limits=LIMITS)
    assert document.title == "Main Title"
    assert document.author is None


def test_split_front_matter_reads_simple_lines_only() -> None:
    meta, body = split_front_matter("---\ntitle: 'Q'\nnested:\n  - x\nlang: de\n...\nBody")
    assert meta == {"title": "Q", "lang": "de"}
    assert body == "Body"
    assert split_front_matter("No front matter\n---\n") == ({}, "No front matter\n---\n")


def test_only_code_and_raw_html_is_no_readable_text() -> None:
    with pytest.raises(InvalidDocumentError, match=r"^Markdown has no readable text$"):
        markdown_document("```\ncode\n```\n\n<div>raw</div>\n", limits=LIMITS)
