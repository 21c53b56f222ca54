"""Pronunciation lexicons: a word as written → what to say instead (an alias) or how to say
it (phonemes).

A :class:`Lexicon` is what a request applies: the entries of the lexicons it names (or the
tenant's default), resolved by the front at submission, so every worker reads the text
alike and a job keeps the lexicons as they were when it was submitted.
:meth:`Lexicon.find` lists where its entries occur in a text; the text pipeline
(:func:`voicelane.core.speech_text.prepare_text`) rewrites them, mapped back to the input.

Lexicons come in two forms, both checked by the same rules (:func:`check_entry`):

* W3C PLS 1.0 (:func:`parse_pls`), read with the hardened XML reader
  (:mod:`voicelane.core.safe_xml`: no DTD, no entities);
* JSON (:func:`parse_lexicon_json`): ``{"entries": [{"graphemes": [...], "alias": "..."} |
  {"graphemes": [...], "phoneme": "...", "alphabet": "ipa"}]}``.

:func:`read_lexicon` takes either (a file of the CLI's ``--lexicon``). Storage per tenant is
:mod:`voicelane.core.ledger.lexicons`'.

**Matching** (:meth:`Lexicon.find`): case-sensitive, as PLS; whole words — an edge of a
grapheme that is a letter or digit of a script written with spaces (Latin, Cyrillic, Greek,
Hangul...) must not touch another such letter or digit (or a combining mark) in the text,
while an edge in a script written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar) may
touch anything: ``北京`` matches in ``我在北京工作``, ``AI`` in ``用AI做`` but not in ``AIR``. A
grapheme never ends just before a combining mark (it would cut a letter in two). A space in a
grapheme matches any run of whitespace. Left to right, never overlapping; where several
graphemes start at one place the longest that fits wins; a later entry for the same grapheme
replaces an earlier one. A radix tree of the graphemes, walked from each place one may start
(so the cost per character does not grow with the number of entries), built once per lexicon
and cached.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from voicelane.common.errors import InvalidInputError, MalformedRequestError, TextTooLargeError
from voicelane.core.safe_xml import XmlElement, XmlError, XmlText, parse_xml

__all__ = [
    "ALPHABETS",
    "MAX_ALIAS_CHARS",
    "MAX_ENTRIES",
    "MAX_GRAPHEME_CHARS",
    "MAX_PHONEME_CHARS",
    "MAX_PLS_CHARS",
    "PLS_NAMESPACE",
    "Lexicon",
    "LexiconEntry",
    "LexiconHit",
    "check_entry",
    "parse_lexicon_json",
    "parse_pls",
    "read_lexicon",
]

ALPHABETS = ("ipa", "x-sampa")
"""The phonetic alphabets an entry may use (what espeak-ng can be given)."""
MAX_GRAPHEME_CHARS = 100
MAX_ALIAS_CHARS = 200
MAX_PHONEME_CHARS = 200
MAX_ENTRIES = 5_000
"""Entries in one lexicon (a tenant's lexicons hold at most this many together:
:data:`voicelane.core.ledger.lexicons.MAX_TENANT_ENTRIES`)."""
MAX_PLS_CHARS = 2 * 1024 * 1024
"""A PLS document's characters (XML is verbose; the stored entries are bounded apart)."""
PLS_NAMESPACE = "http://www.w3.org/2005/01/pronunciation-lexicon"
PLS_MAX_DEPTH = 16
"""lexicon > lexeme > grapheme is 3 deep; ``metadata`` may hold a little RDF."""
READ_ONLY_FIELDS = frozenset({"name", "default", "entry_count", "size_bytes", "updated_at"})
"""What ``GET /v1/lexicons/{name}`` shows beside ``entries``: ignored in a JSON lexicon, so a
lexicon read back can be sent again as it is."""


@dataclass(frozen=True, slots=True)
class LexiconEntry:
    graphemes: tuple[str, ...]
    """The spellings it applies to (whole words, case-sensitive as in W3C PLS)."""
    alias: str | None = None
    """Text to say instead."""
    phoneme: str | None = None
    """How to say it, in ``alphabet``."""
    alphabet: str = "ipa"
    """``ipa`` or ``x-sampa``."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"graphemes": list(self.graphemes)}
        if self.alias is not None:
            out["alias"] = self.alias
        if self.phoneme is not None:
            out["phoneme"] = self.phoneme
            out["alphabet"] = self.alphabet
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LexiconEntry:
        return cls(
            graphemes=tuple(data["graphemes"]),
            alias=data.get("alias"),
            phoneme=data.get("phoneme"),
            alphabet=data.get("alphabet", "ipa"),
        )


@dataclass(frozen=True, slots=True)
class LexiconHit:
    """``text[start:end]`` is one of ``entry``'s graphemes."""

    start: int
    end: int
    entry: LexiconEntry


@dataclass(frozen=True, slots=True)
class Lexicon:
    entries: tuple[LexiconEntry, ...] = ()
    _matcher: _Matcher | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )
    """:meth:`find`'s compiled pattern, made on first use."""

    def __bool__(self) -> bool:
        return bool(self.entries)

    def to_json(self) -> str:
        return json.dumps(
            [e.to_json() for e in self.entries], ensure_ascii=False, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, raw: str) -> Lexicon:
        return cls(tuple(LexiconEntry.from_json(e) for e in json.loads(raw)) if raw else ())

    def find(self, text: str) -> list[LexiconHit]:
        """Where the entries' graphemes occur in ``text`` as whole words, left to right,
        never overlapping (the longest grapheme wins where several start at one place; a
        later entry for the same grapheme replaces an earlier one, as in PLS)."""
        if not self.entries or not text:
            return []
        matcher = self._matcher
        if matcher is None:
            matcher = _matcher_for(self.entries)
            object.__setattr__(self, "_matcher", matcher)
        return matcher.find(text)


# ---- matching --------------------------------------------------------------------------------

_CONTINUOUS = re.compile(
    "["
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff\u19e0-\u19ff"  # Khmer
    "\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3038-\u303c"  # CJK radicals, 々〆〇, numerals
    "\u3040-\u30ff\u31f0-\u31ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uff66-\uff9f"  # half-width katakana
    "\U00020000-\U0003134f"  # Han, extensions B to G
    "]"
)
"""Scripts written without spaces between words: a grapheme's edge there needs no boundary."""


@lru_cache(maxsize=8192)
def _kind(char: str) -> int:
    """Flags: :data:`_WORD` for a letter, digit or mark of a script written with spaces (a
    word edge there needs a boundary), :data:`_MARK` for any combining mark; 0 otherwise."""
    mark = unicodedata.category(char)[0] == "M"
    word = (char.isalnum() or mark) and not _CONTINUOUS.match(char)
    return (_WORD if word else 0) | (_MARK if mark else 0)


_WORD = 1
_MARK = 2


class _Node:
    __slots__ = ("edges", "entry")

    def __init__(self, entry: LexiconEntry | None = None) -> None:
        self.edges: dict[str, tuple[str, _Node]] = {}
        """First character → (the edge's label, the node it leads to)."""
        self.entry = entry
        """Set where a grapheme ends."""


def _insert(root: _Node, key: str, entry: LexiconEntry) -> None:
    """Add ``key`` to the radix tree at ``root`` (a later entry replaces an earlier one)."""
    node = root
    while True:
        edge = node.edges.get(key[0])
        if edge is None:
            node.edges[key[0]] = (key, _Node(entry))
            return
        label, child = edge
        common = 0
        limit = min(len(label), len(key))
        while common < limit and label[common] == key[common]:
            common += 1
        if common < len(label):  # split the edge where the key leaves it
            middle = _Node()
            middle.edges[label[common]] = (label[common:], child)
            node.edges[key[0]] = (label[:common], middle)
            child = middle
        if common == len(key):
            child.entry = entry
            return
        node, key = child, key[common:]


def _follow(text: str, at: int, label: str) -> int:
    """Where ``label`` ends if the text spells it from ``at`` (a space in it takes a run of
    whitespace), else -1."""
    if " " not in label:
        return at + len(label) if text.startswith(label, at) else -1
    size = len(text)
    for char in label:
        if char == " ":
            if at >= size or not text[at].isspace():
                return -1
            while at < size and text[at].isspace():
                at += 1
        elif at < size and text[at] == char:
            at += 1
        else:
            return -1
    return at


class _Matcher:
    """A radix tree of a lexicon's graphemes, walked from each place in the text where one
    may start (found by one compiled character class): the cost per character does not grow
    with the number of entries, and the tree's size is that of the graphemes. A space in a
    grapheme takes a whole run of whitespace."""

    def __init__(self, entries: Iterable[LexiconEntry]) -> None:
        self.root = _Node()
        for entry in entries:
            for grapheme in entry.graphemes:
                if key := _collapse(grapheme):
                    _insert(self.root, key, entry)
        firsts = "".join(sorted(self.root.edges))
        self.starts = re.compile(f"[{re.escape(firsts)}]") if firsts else None

    def find(self, text: str) -> list[LexiconHit]:
        if self.starts is None:
            return []
        hits: list[LexiconHit] = []
        resume = 0
        size = len(text)
        for start_match in self.starts.finditer(text):
            start = start_match.start()
            if start < resume:
                continue
            if start and _kind(text[start]) & _WORD and _kind(text[start - 1]):
                continue  # inside a word (or after a combining mark)
            best: tuple[int, LexiconEntry] | None = None
            node = self.root
            at = start
            while at < size:
                edge = node.edges.get(" " if text[at].isspace() else text[at])
                if edge is None:
                    break
                at = _follow(text, at, edge[0])
                if at < 0:
                    break
                node = edge[1]
                if node.entry is not None and _ends_word(text, at):
                    best = (at, node.entry)
            if best is not None:
                hits.append(LexiconHit(start, best[0], best[1]))
                resume = best[0]
        return hits


def _ends_word(text: str, end: int) -> bool:
    """A grapheme may end here: never before a combining mark; after a letter or digit of a
    script written with spaces, not before another."""
    if end >= len(text):
        return True
    after = _kind(text[end])
    if after & _MARK:
        return False
    return not (after & _WORD and _kind(text[end - 1]) & _WORD)


def _collapse(grapheme: str) -> str:
    """Whitespace runs → one space, none at either end (how a grapheme is matched)."""
    return " ".join(grapheme.split())


@lru_cache(maxsize=16)
def _matcher_for(entries: tuple[LexiconEntry, ...]) -> _Matcher:
    """Shared by equal lexicons (a worker rebuilds a job's lexicon for each chunk)."""
    return _Matcher(entries)


# ---- checks ----------------------------------------------------------------------------------


def check_entry(
    graphemes: Iterable[object],
    *,
    alias: object = None,
    phoneme: object = None,
    alphabet: object = None,
    where: str,
    field: str,
) -> LexiconEntry:
    """One entry from what a lexicon file said, or InvalidInputError naming ``where``
    (``entries.3``, ``line 7, column 5``) and ``field``: at least one grapheme, none blank
    or over :data:`MAX_GRAPHEME_CHARS`; exactly one of an alias (at most
    :data:`MAX_ALIAS_CHARS`) or a phoneme (at most :data:`MAX_PHONEME_CHARS`, in one of
    :data:`ALPHABETS`; X-SAMPA is ASCII). Graphemes and aliases have their whitespace runs
    collapsed to one space."""

    def fail(message: str) -> InvalidInputError:
        return InvalidInputError(f"{where}: {message}", field=field)

    spellings: list[str] = []
    for index, grapheme in enumerate(graphemes):
        if not isinstance(grapheme, str):
            raise fail(f"grapheme {index + 1} is not a string")
        _check_chars(grapheme, f"grapheme {index + 1}", fail)
        collapsed = _collapse(grapheme)
        if not collapsed:
            raise fail(f"grapheme {index + 1} is blank")
        if len(collapsed) > MAX_GRAPHEME_CHARS:
            raise fail(
                f"grapheme {index + 1} is {len(collapsed)} characters; at most {MAX_GRAPHEME_CHARS}"
            )
        if collapsed not in spellings:
            spellings.append(collapsed)
    if not spellings:
        raise fail("no grapheme (the word to match)")
    if (alias is None) == (phoneme is None):
        raise fail("give exactly one of an alias or a phoneme")
    if alias is not None:
        if alphabet is not None:
            raise fail("an alphabet applies to a phoneme, not an alias")
        if not isinstance(alias, str):
            raise fail("alias is not a string")
        _check_chars(alias, "alias", fail)
        said = _collapse(alias)
        if not said:
            raise fail("alias is blank")
        if len(said) > MAX_ALIAS_CHARS:
            raise fail(f"alias is {len(said)} characters; at most {MAX_ALIAS_CHARS}")
        return LexiconEntry(tuple(spellings), alias=said)
    if not isinstance(phoneme, str):
        raise fail("phoneme is not a string")
    _check_chars(phoneme, "phoneme", fail)
    sounds = phoneme.strip()
    if not sounds:
        raise fail("phoneme is blank")
    if len(sounds) > MAX_PHONEME_CHARS:
        raise fail(f"phoneme is {len(sounds)} characters; at most {MAX_PHONEME_CHARS}")
    name = "ipa" if alphabet is None else alphabet
    if not isinstance(name, str) or name.lower() not in ALPHABETS:
        raise fail(f"alphabet {name!r} is not one of {', '.join(ALPHABETS)}")
    name = name.lower()
    if name == "x-sampa" and not sounds.isascii():
        raise fail("an x-sampa phoneme is ASCII only")
    return LexiconEntry(tuple(spellings), phoneme=sounds, alphabet=name)


def _check_chars(value: str, what: str, fail: Any) -> None:
    """No lone surrogates (no UTF-8 store takes them), no control characters."""
    for offset, char in enumerate(value):
        category = unicodedata.category(char)
        if category == "Cs":
            raise fail(f"{what} is not valid Unicode (a lone surrogate at offset {offset})")
        if category == "Cc" and char not in "\t\n\r":
            raise fail(f"{what} holds a control character (U+{ord(char):04X})")


def _bounded_count(entries: list[LexiconEntry], prefix: str, field: str) -> None:
    if len(entries) > MAX_ENTRIES:
        raise TextTooLargeError(
            f"{prefix}: {len(entries):,} entries; a lexicon holds at most {MAX_ENTRIES:,}",
            field=field,
        )


# ---- JSON ------------------------------------------------------------------------------------


def parse_lexicon_json(
    data: object, *, field: str = "entries", source: str | None = None
) -> Lexicon:
    """A lexicon from its JSON form (already decoded): ``{"entries": [{"graphemes": [...],
    "alias": "..."} | {"graphemes": [...], "phoneme": "...", "alphabet": "ipa"}]}``; a
    grapheme may be given alone as ``"grapheme": "..."``. The fields
    ``GET /v1/lexicons/{name}`` adds (:data:`READ_ONLY_FIELDS`) are ignored. Errors:
    InvalidInputError naming ``entries.N`` (``field``: ``entries``, or the key at fault);
    with a ``source`` (a file's name) every message starts with it instead."""
    head = f"{source}: entries" if source else field
    if not isinstance(data, dict):
        raise MalformedRequestError("a JSON lexicon must be an object with 'entries'")
    unknown = sorted(str(key) for key in data if key not in READ_ONLY_FIELDS | {"entries"})
    if unknown:
        where = f"{source}: {unknown[0]}" if source else unknown[0]
        raise InvalidInputError(f"{where}: unknown field", field=field if source else unknown[0])
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list):
        raise InvalidInputError(f"{head}: a list of entries is required", field=field)
    entries: list[LexiconEntry] = []
    for index, raw in enumerate(raw_entries):
        where = f"{head}.{index}"
        if not isinstance(raw, dict):
            raise InvalidInputError(f"{where}: an entry is an object", field=field)
        extra = sorted(
            str(k)
            for k in raw
            if k not in ("graphemes", "grapheme", "alias", "phoneme", "alphabet")
        )
        if extra:
            raise InvalidInputError(f"{where}: unknown field {extra[0]!r}", field=field)
        if ("graphemes" in raw) == ("grapheme" in raw):
            raise InvalidInputError(
                f"{where}: give 'graphemes' (a list) or 'grapheme' (one)", field=field
            )
        graphemes = raw["graphemes"] if "graphemes" in raw else [raw["grapheme"]]
        if not isinstance(graphemes, list):
            raise InvalidInputError(f"{where}: graphemes is a list of strings", field=field)
        entries.append(
            check_entry(
                graphemes,
                alias=raw.get("alias"),
                phoneme=raw.get("phoneme"),
                alphabet=raw.get("alphabet"),
                where=where,
                field=field,
            )
        )
        _bounded_count(entries, head, field)
    return Lexicon(tuple(entries))


# ---- W3C PLS ---------------------------------------------------------------------------------


def parse_pls(xml: str, *, field: str = "lexicon", source: str | None = None) -> Lexicon:
    """A lexicon from a W3C PLS 1.0 document: ``<lexicon version="1.0" alphabet="ipa"
    xml:lang="..." xmlns="http://www.w3.org/2005/01/pronunciation-lexicon">`` holding
    ``<lexeme>``\\ s of one or more ``<grapheme>`` and their pronunciations, ``<alias>`` or
    ``<phoneme>`` (its ``alphabet`` attribute, or the lexicon's: ``ipa``, ``x-sampa``).

    A lexeme with several pronunciations uses the one marked ``prefer="true"``, else the
    first (as PLS says a processor should). ``meta``, ``metadata`` and ``example`` are
    ignored, as are ``xml:lang`` and a lexeme's ``role``. Errors name the line and column:
    a document that is not well-formed XML, or that the hardened reader refuses (a DOCTYPE,
    an entity), is :class:`MalformedRequestError` (400); a well-formed document that breaks
    PLS or the entry rules is :class:`InvalidInputError` (422); ``field`` is ``lexicon``,
    and the message starts with it (or with ``source``, a file's name, when given)."""
    head = source or field
    declared = _DECLARED_ENCODING.match(xml.removeprefix("\ufeff"))
    if declared and declared.group(1).lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise InvalidInputError(
            f"{head}: line 1: the document declares encoding {declared.group(1)!r}; "
            "send it as UTF-8 (and declare UTF-8, or no encoding)",
            field=field,
        )
    try:
        root = parse_xml(
            xml.removeprefix("\ufeff"), max_chars=MAX_PLS_CHARS, max_depth=PLS_MAX_DEPTH
        )
    except XmlError as error:
        raise MalformedRequestError(
            f"{head}: line {error.line}, column {error.column}: {error.reason}", field=field
        ) from None

    def fail(element: XmlElement, message: str) -> InvalidInputError:
        return InvalidInputError(
            f"{head}: line {element.line}, column {element.column}: {message}", field=field
        )

    if root.name != "lexicon":
        raise fail(root, f"the root element is <{root.tag}>, not <lexicon>")
    namespace = root.attrs.get("xmlns")
    if namespace is not None and namespace != PLS_NAMESPACE:
        raise fail(root, f"namespace {namespace!r} is not PLS's ({PLS_NAMESPACE})")
    version = root.attrs.get("version")
    if version is not None and version != "1.0":
        raise fail(root, f"PLS version {version!r}; only 1.0 is read")
    default_alphabet = root.attrs.get("alphabet", "ipa")
    if default_alphabet.lower() not in ALPHABETS:
        raise fail(root, f"alphabet {default_alphabet!r} is not one of {', '.join(ALPHABETS)}")
    entries: list[LexiconEntry] = []
    for child in _elements(root, fail):
        if child.name in ("meta", "metadata"):
            continue
        if child.name != "lexeme":
            raise fail(child, f"<{child.tag}> is not a PLS element (lexeme, meta, metadata)")
        entries.append(_lexeme(child, default_alphabet, fail, head, field))
        _bounded_count(entries, head, field)
    return Lexicon(tuple(entries))


_DECLARED_ENCODING = re.compile(r"""<\?xml[^>]*?\bencoding\s*=\s*["']([^"']*)["']""")
"""The encoding an XML declaration names: the text arrives decoded, as UTF-8."""


def _elements(parent: XmlElement, fail: Any) -> list[XmlElement]:
    """The child elements; text between them must be whitespace."""
    out = []
    for child in parent.children:
        if isinstance(child, XmlText):
            if child.text.strip():
                raise fail(parent, f"text {child.text.strip()[:20]!r} directly in <{parent.tag}>")
        else:
            out.append(child)
    return out


def _text_only(element: XmlElement, fail: Any) -> str:
    for child in element.children:
        if isinstance(child, XmlElement):
            raise fail(child, f"<{child.tag}> inside <{element.tag}>: text only")
    return element.text()


def _lexeme(
    lexeme: XmlElement, default_alphabet: str, fail: Any, head: str, field: str
) -> LexiconEntry:
    graphemes: list[str] = []
    pronunciations: list[XmlElement] = []
    for child in _elements(lexeme, fail):
        if child.name == "grapheme":
            if pronunciations:
                raise fail(child, "a <grapheme> after a pronunciation (graphemes come first)")
            graphemes.append(_text_only(child, fail))
        elif child.name in ("alias", "phoneme"):
            pronunciations.append(child)
        elif child.name != "example":
            raise fail(child, f"<{child.tag}> is not a lexeme element")
    if not graphemes:
        raise fail(lexeme, "a <lexeme> without a <grapheme>")
    if not pronunciations:
        raise fail(lexeme, "a <lexeme> without an <alias> or a <phoneme>")
    preferred = [p for p in pronunciations if p.attrs.get("prefer") == "true"]
    chosen = (preferred or pronunciations)[0]
    said = _text_only(chosen, fail)
    where = f"line {chosen.line}, column {chosen.column}"
    if chosen.name == "alias":
        return check_entry(graphemes, alias=said, where=f"{head}: {where}", field=field)
    return check_entry(
        graphemes,
        phoneme=said,
        alphabet=chosen.attrs.get("alphabet", default_alphabet),
        where=f"{head}: {where}",
        field=field,
    )


# ---- either ----------------------------------------------------------------------------------


def read_lexicon(document: str, *, source: str = "lexicon") -> Lexicon:
    """A lexicon file: W3C PLS when it starts with ``<`` (after a BOM and whitespace), the
    JSON form otherwise. Every error's message starts with ``source`` (the file's name) and
    names the field ``lexicon``."""
    stripped = document.removeprefix("\ufeff").lstrip()
    if stripped.startswith("<"):
        return parse_pls(stripped, source=source)
    try:
        data = json.loads(stripped)
    except (json.JSONDecodeError, RecursionError) as error:
        raise MalformedRequestError(f"{source}: malformed JSON: {error}", field="lexicon") from None
    return parse_lexicon_json(data, field="lexicon", source=source)
