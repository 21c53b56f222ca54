"""Turn an LLM's streamed markdown reply into the plain text to speak, while it is written.

:class:`SpeakableStream` takes the reply's raw text deltas (:meth:`~SpeakableStream.feed`) and
returns :class:`Cut` objects: cleaned text to send into a conversation now, plus a one-time
``flush`` for the fast first fragment. :func:`clean_for_speech` applies the same rules to a
whole text; concatenating every ``Cut.text`` of a stream equals ``clean_for_speech`` of the whole
raw text, however the text was split into deltas.

Markdown (inline constructs never span a line break)
    * Dropped: fenced code blocks (a line starting with three or more backticks opens one, a
      line of at least as many backticks closes it; a block never closed runs to the end),
      images ``![alt](url)``, bare ``http://``/``https://`` URLs (trailing ``.,;:!?`` and an
      unbalanced ``)`` are left as text), HTML tags and ``<https://...>`` autolinks (``<br>``
      becomes a space), and whole lines made only of ``- * _ = | : +`` (horizontal rules,
      table separator rows, setext underlines) together with their line break.
    * Unwrapped: links ``[text](url)`` -> ``text`` (text cleaned), inline code ``x`` -> ``x``
      (verbatim; unmatched backticks are dropped), ``\\*`` escapes -> ``*``.
    * At a line start: indentation, ``#``-``######`` headers, ``>`` quotes, bullets
      ``- * +`` and task boxes ``[ ]``/``[x]`` after a bullet are dropped; numbered markers
      (``1.``) stay -- :func:`voicelane.core.text.split_sentences` knows them.
    * Emphasis runs of ``*``, ``_`` and ``~~`` are dropped unless they stand between two
      spaces (``2 * 3``), ``_`` inside a word (``snake_case``), ``*`` between two digits
      (``2*3``); one ``~`` (``~5 min``) stays. Runs are dropped whether or not they pair up.
    * ``|`` becomes a space.
Emoji
    Pictographs (U+1F000-U+1FAFF: emoticons, symbols and pictographs, regional-indicator flags,
    skin tones), misc symbols and dingbats (U+2600-U+27BF), the emoji among misc technical and
    arrows (``⌚ ⏰ ⭐ ⬆``...), variation selectors, zero-width joiners, tag characters and
    keycap sequences (``1️⃣``, the digit included) are removed. CJK text and punctuation are
    never touched.
Whitespace
    Runs of whitespace become one space; a run holding line breaks (``\\n``) becomes one or two
    ``\\n`` (three or more collapse to two) so list items, headers and paragraphs still end
    sentences; nothing leads or trails the text.
Streaming
    Only what may still turn out to be markup is held back: a marker run until the character
    after it, a ``[`` until its link is decided, a code span until it closes or its line ends,
    a possible URL scheme, a line start until its prefix is known, whitespace until text
    follows it. An unclosed fence swallows the rest; :meth:`SpeakableStream.end` drops it.
Fast first fragment
    At most once per stream, ``Cut.flush`` is True when the spoken text so far weighs at least
    ``first_fragment_min_weight`` (a CJK character -- see :func:`voicelane.core.text.contains_cjk`
    -- counts 2, any other non-space character 1) and ends at a clause break: ``， 、 ： —`` and
    ``。 ！ ？ ；`` at once; ASCII ``, :`` once the next character is whitespace or CJK, and
    ``. ! ? ; …`` once the next visible character confirms that
    :func:`~voicelane.core.text.split_sentences` ends a sentence there (``Dr.``, ``3.14``, ``No. 5``
    do not). Closing quotes/brackets after the mark stay with it; nothing is a break between two
    digits (``3，000``). When the break lies inside a delta, the cut stops at the break and the
    rest comes with the next cut; when the break was confirmed only by the new delta, the
    flushing cut is empty (``Cut("", True)``) and the delta comes with the next cut. A stream
    without such a break never flushes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from voicelane.core.text import MIN_MAX_CHARS, contains_cjk, split_sentences

__all__ = ["DEFAULT_FIRST_FRAGMENT_MIN_WEIGHT", "Cut", "SpeakableStream", "clean_for_speech"]

DEFAULT_FIRST_FRAGMENT_MIN_WEIGHT = 10
"""About 10 Latin characters or 5 CJK characters before the fast first fragment may end."""

# --- character classes and patterns ---------------------------------------------------------

_EMOJI = (
    "\u200d\u20e3\ufe00-\ufe0f"  # zero-width joiner, keycap, variation selectors
    "\u231a\u231b\u2328\u23cf\u23e9-\u23f3\u23f8-\u23fa"  # ⌚ ⌛ ⌨ ⏏ ⏩-⏳ ⏸-⏺
    "\u2600-\u27bf"  # misc symbols, dingbats
    "\u2934\u2935\u2b05-\u2b07\u2b1b\u2b1c\u2b50\u2b55"  # ⤴ ⤵ ⬅-⬇ ⬛ ⬜ ⭐ ⭕
    "\U0001f000-\U0001faff"  # pictographs, emoticons, flags, skin tones, ...
    "\U000e0020-\U000e007f"  # tag characters (subdivision flags)
)
_HSPACE = " \t\r"
_KEYCAP_BASES = "0123456789#*"
_DIGITS = "0123456789"
_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ESCAPABLE = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

# Plain text: anything that cannot start markup. Digits and '#' are plain unless a keycap
# mark follows; 'h' is plain inside a word (a URL starts only after a non-alphanumeric).
_PLAIN_RE = re.compile(
    "(?:[^\n*_~`\\[!<\\\\|hH0-9#" + _EMOJI + "]+|[0-9#](?![\ufe0f\u20e3])|(?<=[A-Za-z0-9])[hH])+"
)
_EMOJI_RE = re.compile("[" + _EMOJI + "]+")
_KEYCAP_RE = re.compile("[0-9#*]\ufe0f?\u20e3")
_RUN_RE = {c: re.compile(re.escape(c) + "+") for c in "*_~`"}
_RULE_LINE_RE = re.compile(r"[-*_=|:+ \t\r]+")
_FENCE_RE = re.compile(r"[ \t\r]*(`{3,})")
_PARTIAL_FENCE_RE = re.compile(r"[ \t\r]*`*")
_CLOSING_FENCE_RE = re.compile(r"[ \t\r]*(`+)[ \t\r]*")
_PARTIAL_CLOSING_FENCE_RE = re.compile(r"[ \t\r]*`*[ \t\r]*")
_TASK_BOX_RE = re.compile(r"\[[ xX]\]")
_TASK_BOX_PREFIX_RE = re.compile(r"\[(?:[ xX]\]?)?")
_LINK_DEST_RE = re.compile(r"\((?:[^()\n]|\([^()\n]*\))*\)")
_SCHEME = r"(?i:https?://)"
_SCHEME_PREFIX = r"(?i:h(?:t(?:t(?:ps?(?::/{0,2})?)?)?)?)"
_SCHEME_RE = re.compile(_SCHEME)
_SCHEME_PREFIX_RE = re.compile(_SCHEME_PREFIX)
_URL_BODY_RE = re.compile(r"[A-Za-z0-9\-._~:/?#@!$&+,;=%()]*")
_TAG_MAX_ATTRS = 200
_TAG_ATTRS = f"(?:[ \\t/][^<>\n]{{0,{_TAG_MAX_ATTRS}}})"
_TAG_RE = re.compile(f"</?([A-Za-z][A-Za-z0-9-]*){_TAG_ATTRS}?>|<{_SCHEME}[^\\s<>]*>")
_TAG_PREFIX_RE = re.compile(
    f"<(?:/?(?:[A-Za-z][A-Za-z0-9-]*{_TAG_ATTRS}?)?)?|<(?:{_SCHEME_PREFIX}|{_SCHEME}[^\\s<>]*)"
)
_WS_OR_TEXT_RE = re.compile(r"(\s+)|(\S+)")

_CLOSERS = "\"'\u201d\u2019\u300d\u300f\uff09)]\uff3d\uff5d}\u3009\u300b\u3011\u3015\u3017\u00bb"
_IMMEDIATE_BREAKS = "\uff0c\u3001\uff1a\u3002\uff01\uff1f\uff1b\u2014"  # ， 、 ： 。 ！ ？ ； —
_ASCII_ENDS = ".!?;\u2026"
_BREAK_RE = re.compile(
    "([" + re.escape(_IMMEDIATE_BREAKS + _ASCII_ENDS + ",:") + "]+)[" + re.escape(_CLOSERS) + "]*"
)
_VISIBLE_RE = re.compile(r"\S")
_BREAK_CONTEXT = 32  # characters before a sentence mark that split_sentences is shown

_Step = tuple[int, str] | None
"""What one scanner step did: (next position, text to speak), or None to wait for input."""


# --- public API -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cut:
    """What to send into the conversation after one delta."""

    text: str
    """Cleaned text to send now (may be empty)."""
    flush: bool
    """True at most once per stream: the fast first fragment is complete, speak what was
    sent so far."""


class SpeakableStream:
    """Clean one streamed reply for speech, delta by delta (see the module docstring)."""

    def __init__(
        self, *, first_fragment_min_weight: int = DEFAULT_FIRST_FRAGMENT_MIN_WEIGHT
    ) -> None:
        if first_fragment_min_weight < 0:
            raise ValueError(f"first_fragment_min_weight must be >= 0: {first_fragment_min_weight}")
        self._min_weight = first_fragment_min_weight
        self._scanner = _Scanner()
        self._spacer = _Spacer()
        self._parts: list[str] = []
        self._held = ""  # cleaned text after the first fragment's break, sent with the next cut
        self._flushed = False
        self._weight = 0  # weight of the spoken text, kept until the flush
        self._line = ""  # last line of the spoken text, kept until the flush
        self._ended = False

    @property
    def spoken(self) -> str:
        """Every text returned so far, concatenated."""
        return "".join(self._parts)

    def feed(self, delta: str) -> Cut:
        """Take the next raw delta; return what became decided."""
        self._check_open()
        text = self._held + self._spacer.push(self._scanner.scan(delta, final=False), final=False)
        self._held = ""
        if not self._flushed and text:
            cut = self._first_fragment_end(text)
            if cut is not None:
                text, self._held = text[:cut], text[cut:]
                self._flushed = True
                return self._emit(text, flush=True)
        return self._emit(text, flush=False)

    def end(self) -> Cut:
        """The reply is complete: return everything still held back, cleaned (never a flush)."""
        self._check_open()
        self._ended = True
        text = self._held + self._spacer.push(self._scanner.scan("", final=True), final=True)
        self._held = ""
        return self._emit(text, flush=False)

    def _check_open(self) -> None:
        if self._ended:
            raise RuntimeError("the stream has ended")

    def _emit(self, text: str, *, flush: bool) -> Cut:
        if text:
            self._parts.append(text)
        return Cut(text, flush)

    def _first_fragment_end(self, text: str) -> int | None:
        """Offset in ``text`` just after the first fragment's break, or None (not yet)."""
        probe = self._line + text
        start = len(self._line)
        weight, counted = self._weight, start
        for m in _BREAK_RE.finditer(probe, max(0, start - 8)):
            end = m.end()
            if end < start:
                continue
            weight += _weight(probe[counted:end])
            counted = end
            if weight < self._min_weight:
                continue
            verdict = _is_break(probe, m)
            if verdict is None:
                break
            if verdict:
                return end - start
        self._weight = weight + _weight(probe[counted:])
        self._line = probe[probe.rfind("\n") + 1 :]
        return None


def clean_for_speech(text: str) -> str:
    """The whole-text version of :class:`SpeakableStream`: ``text`` cleaned for speech."""
    return _Spacer().push(_Scanner().scan(text, final=True), final=True)


# --- the first fragment -----------------------------------------------------------------------


def _weight(text: str) -> int:
    """A CJK character counts 2, any other non-space character 1."""
    return sum(2 if contains_cjk(c) else 1 for c in text if not c.isspace())


def _is_break(text: str, m: re.Match[str]) -> bool | None:
    """Is the punctuation run ``m`` in the spoken ``text`` a clause break? None: not known yet."""
    punct, start, end = m.group(1), m.start(), m.end()
    rest = text[end:]
    if any(c in _IMMEDIATE_BREAKS for c in punct):
        if start > 0 and text[start - 1] in _DIGITS:  # 3，000 is a number
            return None if not rest else rest[0] not in _DIGITS
        return True
    visible = _VISIBLE_RE.search(rest)
    if visible is None:
        return None
    if not any(c in _ASCII_ENDS for c in punct):  # ',' or ':'
        return rest[0].isspace() or contains_cjk(rest[0])
    # split_sentences decides from a few words before the mark and from whether a list number
    # starts its line: show it the line, or on a long line the words from a space on, after a
    # stand-in word so that they do not look like the start of a line.
    first = line_start = text.rfind("\n", 0, end) + 1
    if end - line_start > _BREAK_CONTEXT:
        space = text.find(" ", end - _BREAK_CONTEXT, start)
        first = line_start if space < 0 else space
    prefix = "x" if first > line_start else ""
    window = prefix + text[first : end + visible.end()]
    at = len(prefix) + end - first
    segments = split_sentences(window, max(MIN_MAX_CHARS, len(window)))
    return any(s.end == at for s in segments)


# --- whitespace -------------------------------------------------------------------------------


class _Spacer:
    """Collapse whitespace in a stream of text; hold trailing whitespace until text follows."""

    __slots__ = ("_started", "_ws")

    def __init__(self) -> None:
        self._ws = ""  # pending: "", " ", "\n" or "\n\n"
        self._started = False

    def push(self, text: str, *, final: bool) -> str:
        out: list[str] = []
        for m in _WS_OR_TEXT_RE.finditer(text):
            space = m.group(1)
            if space is not None:
                breaks = space.count("\n")
                if breaks:
                    self._ws = "\n" * min(2, self._ws.count("\n") + breaks)
                elif not self._ws:
                    self._ws = " "
                continue
            if self._started and self._ws:
                out.append(self._ws)
            self._ws = ""
            self._started = True
            out.append(m.group(2))
        if final:
            self._ws = ""
        return "".join(out)


# --- markup -----------------------------------------------------------------------------------


class _Scanner:
    """Strip markdown and emoji from raw text fed in pieces.

    :meth:`scan` runs small steps from left to right; a step that cannot decide yet (the input
    ends inside something that may be markup) waits for more input unless ``final``. Each step
    looks only at the text from its position on and at the character before it, so the output
    is the same however the input was split.
    """

    __slots__ = ("_buf", "_fence", "_line_start", "_prev")

    def __init__(self, *, line_start: bool = True, prev: str = "\n") -> None:
        self._buf = ""  # raw input not consumed yet
        self._fence = 0  # backtick count of the open code fence; 0 outside code
        self._line_start = line_start
        self._prev = prev  # the raw character before the buffer

    def scan(self, delta: str, *, final: bool) -> str:
        buf = self._buf + delta
        out: list[str] = []
        pos = 0
        while pos < len(buf):
            step = self._step(buf, pos, final)
            if step is None:
                break
            pos, piece = step
            out.append(piece)
        if pos:
            self._prev = buf[pos - 1]
        self._buf = buf[pos:]
        return "".join(out)

    def _step(self, buf: str, pos: int, final: bool) -> _Step:
        if self._fence:
            return self._code_block_step(buf, pos, final)
        if self._line_start:
            return self._line_start_step(buf, pos, final)
        return self._inline_step(buf, pos, final)

    def _before(self, buf: str, pos: int) -> str:
        return buf[pos - 1] if pos else self._prev

    # -- lines

    def _line_start_step(self, buf: str, pos: int, final: bool) -> _Step:
        if buf[pos] == "\n":
            return pos + 1, "\n"
        eol, complete = _line_end(buf, pos, final)
        line = buf[pos:eol]
        if _RULE_LINE_RE.fullmatch(line):  # a rule or table separator, or only spaces so far
            if not complete:
                return None
            return (eol, "") if line.isspace() else (_after_line(buf, eol), "")
        fence = _FENCE_RE.match(line)
        if fence is not None:
            if not complete:
                return None
            if "`" not in line[fence.end() :]:
                self._fence = len(fence.group(1))
                return _after_line(buf, eol), ""
        elif not complete and _PARTIAL_FENCE_RE.fullmatch(line):
            return None
        prefix = _line_prefix(line, complete)
        if prefix is None:
            return None
        self._line_start = False
        return pos + prefix, ""

    def _code_block_step(self, buf: str, pos: int, final: bool) -> _Step:
        eol, complete = _line_end(buf, pos, final)
        if self._line_start:
            line = buf[pos:eol]
            closing = _CLOSING_FENCE_RE.fullmatch(line)
            if complete and closing is not None and len(closing.group(1)) >= self._fence:
                self._fence = 0
                return _after_line(buf, eol), ""
            if not complete and _PARTIAL_CLOSING_FENCE_RE.fullmatch(line):
                return None
        self._line_start = complete
        return (_after_line(buf, eol) if complete else eol), ""

    # -- inline

    def _inline_step(self, buf: str, pos: int, final: bool) -> _Step:
        c = buf[pos]
        if c == "\n":
            self._line_start = True
            return pos + 1, "\n"
        plain = _PLAIN_RE.match(buf, pos)
        if plain is not None:
            end = plain.end()
            if end == len(buf) and not final and buf[end - 1] in _KEYCAP_BASES:
                end -= 1  # a keycap mark may follow
            if end > pos:
                return end, buf[pos:end]
        if c in _KEYCAP_BASES:
            keycap = _KEYCAP_RE.match(buf, pos)
            if keycap is not None:
                return keycap.end(), ""
            if not final and (buf[pos + 1 :] in ("", "\ufe0f")):
                return None
            if c != "*":
                return pos + 1, c
        if c in "*_~":
            return self._marker_step(buf, pos, final)
        emoji = _EMOJI_RE.match(buf, pos)
        if emoji is not None:
            return emoji.end(), ""
        if c == "`":
            return _code_span_step(buf, pos, final)
        if c == "[":
            return self._link_step(buf, pos, final)
        if c == "!":
            return _image_step(buf, pos, final)
        if c == "<":
            return _tag_step(buf, pos, final)
        if c == "\\":
            if pos + 1 == len(buf):
                return None if not final else (pos + 1, c)
            if buf[pos + 1] in _ESCAPABLE:
                return pos + 2, buf[pos + 1]
            return pos + 1, c
        if c == "|":
            return pos + 1, " "
        return self._url_step(buf, pos, final)  # 'h' or 'H' after a non-alphanumeric

    def _marker_step(self, buf: str, pos: int, final: bool) -> _Step:
        run = _RUN_RE[buf[pos]].match(buf, pos)
        assert run is not None
        end = run.end()
        if end == len(buf) and not final:
            return None
        after = buf[end] if end < len(buf) else "\n"
        keep = _keep_marker(run.group(), self._before(buf, pos), after)
        return end, run.group() if keep else ""

    def _link_step(self, buf: str, pos: int, final: bool) -> _Step:
        link = _link_at(buf, pos, final)
        if link is None:
            return None
        if link is False:
            return pos + 1, "["
        text_end, end = link
        inner = _Scanner(line_start=False, prev=self._before(buf, pos))
        return end, inner.scan(buf[pos + 1 : text_end], final=True)

    def _url_step(self, buf: str, pos: int, final: bool) -> _Step:
        if self._before(buf, pos) in _ASCII_ALNUM:
            return pos + 1, buf[pos]
        scheme = _SCHEME_RE.match(buf, pos)
        if scheme is None:
            if not final and _SCHEME_PREFIX_RE.fullmatch(buf, pos):
                return None
            return pos + 1, buf[pos]
        body = _URL_BODY_RE.match(buf, scheme.end())
        assert body is not None  # the body may be empty
        end = body.end()
        if end == len(buf) and not final:
            return None
        return pos + _url_length(buf[pos:end]), ""


def _line_end(buf: str, pos: int, final: bool) -> tuple[int, bool]:
    """Index of the line break ending the line at ``pos`` (or the buffer's end), and whether
    that line is complete."""
    eol = buf.find("\n", pos)
    return (eol, True) if eol >= 0 else (len(buf), final)


def _after_line(buf: str, eol: int) -> int:
    return eol + 1 if eol < len(buf) else eol


def _line_prefix(line: str, complete: bool) -> int | None:
    """Length of the markup at the start of ``line`` (indentation, headers, quotes, bullets,
    task boxes), or None when the line so far is all prefix and more may follow."""
    i, n = 0, len(line)
    bullet = False
    while True:
        while i < n and line[i] in _HSPACE:
            i += 1
        if i == n:
            return i if complete else None
        c = line[i]
        after_bullet, bullet = bullet, False
        if c == ">":
            i += 1
        elif c == "#":
            j = i
            while j < n and line[j] == "#":
                j += 1
            if j - i > 6:
                return i
            if j == n:
                return j if complete else None
            if line[j] not in _HSPACE:
                return i
            i = j
        elif c in "-*+":
            if i + 1 == n:
                return i + 1 if complete else None
            if line[i + 1] not in _HSPACE:
                return i
            i += 1
            bullet = True
        elif c == "[" and after_bullet:
            box = line[i : i + 4]
            if _TASK_BOX_RE.match(box) and (box[3] in _HSPACE if len(box) == 4 else complete):
                i += 3
            elif not complete and len(box) < 4 and _TASK_BOX_PREFIX_RE.fullmatch(box):
                return None
            else:
                return i
        else:
            return i


def _keep_marker(run: str, before: str, after: str) -> bool:
    """Is the ``*``/``_``/``~`` run between ``before`` and ``after`` text, not emphasis?"""
    if before.isspace() and after.isspace():
        return True  # 2 * 3
    if run[0] == "~":
        return len(run) == 1  # ~5 min
    if run[0] == "_":
        return before.isalnum() and after.isalnum()  # snake_case
    return before in _DIGITS and after in _DIGITS  # 2*3


def _code_span_step(buf: str, pos: int, final: bool) -> _Step:
    """Inline code: its text, verbatim; backticks that never close on their line are dropped."""
    opening = _RUN_RE["`"].match(buf, pos)
    assert opening is not None
    start = opening.end()
    eol, complete = _line_end(buf, pos, final)
    if start == len(buf) and not final:
        return None
    for run in _RUN_RE["`"].finditer(buf, start, eol):
        if run.end() == len(buf) and not complete:
            return None
        if len(run.group()) == len(opening.group()):
            return run.end(), buf[start : run.start()]
    return (start, "") if complete else None


def _link_at(buf: str, pos: int, final: bool) -> tuple[int, int] | Literal[False] | None:
    """``[text](dest)`` at ``pos``: (end of text, end of link); False if it is none; None if
    the input ends before that is known."""
    eol, complete = _line_end(buf, pos, final)
    close = buf.find("]", pos + 1, eol)
    if close < 0 or close + 1 == eol:
        return False if complete else None
    if buf[close + 1] != "(":
        return False
    dest = _LINK_DEST_RE.match(buf, close + 1, eol)
    if dest is None:
        return False if complete else None
    return close, dest.end()


def _image_step(buf: str, pos: int, final: bool) -> _Step:
    if pos + 1 == len(buf):
        return None if not final else (pos + 1, "!")
    if buf[pos + 1] == "[":
        link = _link_at(buf, pos + 1, final)
        if link is None:
            return None
        if link is not False:
            return link[1], ""
    return pos + 1, "!"


def _tag_step(buf: str, pos: int, final: bool) -> _Step:
    eol, complete = _line_end(buf, pos, final)
    tag = _TAG_RE.match(buf, pos, eol)
    if tag is not None:
        return tag.end(), " " if (tag.group(1) or "").lower() == "br" else ""
    if not complete and _TAG_PREFIX_RE.fullmatch(buf, pos, eol):
        return None
    return pos + 1, "<"


def _url_length(url: str) -> int:
    """Length of ``url`` without trailing punctuation and an unbalanced closing parenthesis."""
    end = len(url)
    while end:
        last = url[end - 1]
        if last in ".,;:!?" or (last == ")" and url.count(")", 0, end) > url.count("(", 0, end)):
            end -= 1
        else:
            break
    return end
