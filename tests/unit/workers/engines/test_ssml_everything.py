"""One SSML document with every element of the subset (docs/ssml.md), read and rendered end to
end on espeak-ng and on ChatTTS (the tiny random-weight checkpoint): what each element makes
of the engine's text, and what reaches the audio (the break's silence, the marks' times, the
timings)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.chattts_checkpoint import Checkpoint
from tests.support.speech_audio import longest_silence_ms
from tests.unit.workers.engines.conftest import require_chattts_extra
from voicelane.common.audio import AudioFormat, decode_to_pcm
from voicelane.core.settings import ChatTTSSettings, EmbeddedSettings
from voicelane.core.speech_text import PreparedText, TextOptions
from voicelane.workers.render import EmbeddedRenderer

RATE_HZ = 24000
BREAK_MS = 600


def document(other_voice: str) -> str:
    return f"""<?xml version="1.0"?>
<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="en-US">
  <p><s>Hello <mark name="greeting"/>there.</s>
     <s>Letters <say-as interpret-as="characters">ABC</say-as>, number
        <say-as interpret-as="cardinal">42</say-as>, the
        <say-as interpret-as="ordinal">3</say-as>, digits
        <say-as interpret-as="digits">123</say-as>.</s></p>
  <p>On <say-as interpret-as="date" format="mdy">05/06/2024</say-as> at
     <say-as interpret-as="time">14:30</say-as>, call
     <say-as interpret-as="telephone">555-0100</say-as>.<break time="{BREAK_MS}ms"/>
     The <sub alias="World Wide Web Consortium">W3C</sub> says
     <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme>.
     <prosody rate="slow" volume="loud" pitch="high">Slowly and loudly.</prosody>
     <emphasis level="strong">Really.</emphasis>
     <voice name="{other_voice}">Another voice speaks.</voice>
     <amazon:effect name="whispered">A vendor tag is read as text.</amazon:effect></p>
</speak>"""


@pytest.fixture(scope="module")
def espeak() -> Iterator[EmbeddedRenderer]:
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak", paragraph_pause_s=0)) as renderer:
        yield renderer


@pytest.fixture(scope="module")
def chattts(chattts_checkpoint: Checkpoint) -> Iterator[EmbeddedRenderer]:
    require_chattts_extra()
    from voicelane.workers.engines.chattts import ChatTTSEngine

    engine = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))
    settings = EmbeddedSettings(engine="chattts", voice="seed:3", paragraph_pause_s=0)
    with EmbeddedRenderer(settings, engine=engine) as renderer:
        yield renderer


@pytest.fixture(scope="module", params=["espeak", "chattts"])
def engine(request: pytest.FixtureRequest) -> tuple[str, EmbeddedRenderer, str]:
    """(engine name, its renderer, a second voice it has)."""
    name = str(request.param)
    renderer: EmbeddedRenderer = request.getfixturevalue(name)
    return name, renderer, "en-gb" if name == "espeak" else "seed:7"


def segment_with(prepared: PreparedText, words: str) -> int:
    return next(i for i, s in enumerate(prepared.segments) if words in s.text)


def test_every_element_shapes_the_engine_s_text(engine: tuple[str, EmbeddedRenderer, str]) -> None:
    name, renderer, other = engine
    source = document(other)
    prepared = renderer.prepare(source, TextOptions(ssml=True))
    texts = [s.text for s in prepared.segments]
    joined = " ".join(texts)
    assert prepared.ssml and not re.search(r"\d|<|>", joined), texts
    # say-as, sub: already words; the spans still point into the document.
    for words in ("A B C", "forty-two", "third", "one two three", "May sixth", "fourteen thirty",
                  "zero one zero zero", "World Wide Web Consortium"):  # fmt: skip
        assert words in joined, (words, texts)
    w3c = prepared.segments[segment_with(prepared, "World Wide Web")]
    assert "W3C" in source[w3c.start : w3c.end]
    # phoneme: espeak-ng takes them; ChatTTS reads the word and says so.
    codes = {w.code for w in prepared.warnings}
    if name == "espeak":
        assert "[[" in joined and "tomato" not in joined
    else:
        assert "tomato" in joined and "phonemes-unsupported" in codes
    # prosody, emphasis, voice.
    slow = prepared.segments[segment_with(prepared, "Slowly and loudly")].voicing
    assert slow.rate < 1 and slow.volume_db > 0
    assert (slow.pitch_semitones > 0) == (name == "espeak")  # ChatTTS renders no pitch
    really = prepared.segments[segment_with(prepared, "Really")].voicing
    assert really.rate < 1 and really.volume_db > 0
    assert prepared.segments[segment_with(prepared, "Another voice")].voicing.voice == other
    # break, paragraphs, mark, vendor tag.
    before_break = prepared.segments[segment_with(prepared, "zero one zero zero")]
    assert before_break.pause_after_ms == BREAK_MS
    hello = prepared.segments[segment_with(prepared, "Hello")]
    assert [name for name, _ in hello.marks] == ["greeting"]
    assert hello.text[hello.marks[0][1] :].startswith("there")
    assert "ignored-element" in codes and "vendor tag is read" in joined


def test_the_document_renders_with_its_break_and_marks(
    engine: tuple[str, EmbeddedRenderer, str], tmp_path: Path
) -> None:
    name, renderer, other = engine
    path = tmp_path / "doc.wav"
    result = renderer.render(
        document(other),
        path,
        fmt=AudioFormat.WAV,
        sample_rate_hz=RATE_HZ,
        text_options=TextOptions(ssml=True),
        timings=True,
    )
    pcm, rate = decode_to_pcm(path)
    assert rate == RATE_HZ and result.duration_s > 3
    # The break is the longest silence of the audio, and exactly its length.
    assert abs(longest_silence_ms(pcm, RATE_HZ) - BREAK_MS) <= 50
    (greeting,) = result.marks
    first = result.words[0]  # "Hello" (espeak) or the sentence "Hello there." (ChatTTS)
    assert greeting.name == "greeting" and first.start_ms < greeting.time_ms <= first.end_ms + 1
    # Word timings on espeak, sentence timings on ChatTTS; spans slice the document.
    source = document(other)
    assert all(source[w.char_start : w.char_end] == w.text for w in result.words)
    if name == "espeak":
        assert any(w.text == "there" for w in result.words)
        there = next(w for w in result.words if w.text == "there")
        assert abs(greeting.time_ms - there.start_ms) <= 1
    else:
        assert any(w.text.startswith("Hello") for w in result.words)
