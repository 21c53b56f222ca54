"""Every hostile upload (tests/support/documents.py, docs/security.md "Hostile documents")
is refused through the public entry point with a message naming the fault."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from tests.support.documents import Hostile, hostile_documents
from voicelane.common.errors import InvalidDocumentError, TextTooLargeError
from voicelane.core.documents import DocumentLimits, read_document


@functools.cache
def _cases() -> tuple[Hostile, ...]:
    return tuple(hostile_documents())


CASES = 17
"""How many hostile_documents() builds (checked below)."""


@pytest.mark.parametrize("index", range(CASES))
def test_a_hostile_document_is_refused_naming_the_fault(index: int) -> None:
    case = _cases()[index]
    limits = dataclasses.replace(DocumentLimits(max_chars=1_000_000), **case.limits)
    expected = TextTooLargeError if case.too_large else InvalidDocumentError
    with pytest.raises(expected, match=case.error) as caught:
        read_document(case.data, filename=case.filename, limits=limits)
    assert type(caught.value) is expected, case.name
    assert caught.value.field == "file"
    assert "\n" not in str(caught.value)


def test_the_table_has_every_case() -> None:
    assert len(_cases()) == CASES
