"""The SSML reader: every element and attribute value of the subset, spans into the source,
the vendors' documented samples, and hostile documents."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from voicelane.common.errors import InvalidInputError, MalformedRequestError, TextTooLargeError
from voicelane.core.ssml import (
    MAX_SSML_CHARS,
    Boundary,
    Break,
    Mark,
    Phonemes,
    Speech,
    SsmlDocument,
    looks_like_ssml,
    read_ssml,
)
from voicelane.core.text_blocks import PLAIN, Voicing

SAMPLES = Path(__file__).parents[2] / "data" / "ssml"


def read(body: str, **speak_attributes: str) -> SsmlDocument:
    attributes = "".join(f' {k.replace("_", ":")}="{v}"' for k, v in speak_attributes.items())
    return read_ssml(f"<speak{attributes}>{body}</speak>")


def spoken(document: SsmlDocument) -> list[Speech]:
    """The Speech items that say something (not whitespace alone)."""
    return [item for item in document.speech if item.text.strip()]


def words(document: SsmlDocument) -> str:
    return " ".join(" ".join(item.text for item in document.speech).split())


def one(document: SsmlDocument) -> Speech:
    items = spoken(document)
    assert len(items) == 1, [item.text for item in items]
    return items[0]


def source_of(source: str, speech: Speech) -> str:
    start, end = speech.mapped.source_span(0, len(speech.text))
    return source[start:end]


def refused(source: str, match: str) -> InvalidInputError:
    with pytest.raises(InvalidInputError, match=match) as caught:
        read_ssml(source)
    assert caught.value.field == "text"
    assert str(caught.value).startswith("text: SSML line ")  # the field first, then the place
    return caught.value


# ---- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "<speak>Hi</speak>",
        "  \n\ufeff<speak version='1.1'>Hi</speak>",
        "<speak/>",
        '<?xml version="1.0" encoding="UTF-8"?>\n<speak>Hi</speak>',
        "<speak\n>Hi</speak>",
        # An XML document of any kind is read as SSML (and refused when it is not SSML, or
        # hostile) rather than spoken tag by tag.
        "<?xml version='1.0'?><p/>",
        '<!DOCTYPE speak [<!ENTITY a "b">]><speak>&a;</speak>',
        '<?xml version="1.0"?><!DOCTYPE lolz><speak/>',
    ],
)
def test_documents_that_start_with_speak_look_like_ssml(text: str) -> None:
    assert looks_like_ssml(text)


def test_an_xml_document_that_is_not_ssml_is_refused_not_spoken() -> None:
    with pytest.raises(InvalidInputError, match="speak"):
        read_ssml("<?xml version='1.0'?><p>Hi</p>")


@pytest.mark.parametrize(
    "text",
    ["Hello <speak>", "<speaker>Hi</speaker>", "<p>Hi</p>", "", "<?xmlish"],
)
def test_other_texts_do_not_look_like_ssml(text: str) -> None:
    assert not looks_like_ssml(text)


# ---- text and spans --------------------------------------------------------------------------


def test_text_maps_to_its_own_characters_of_the_source() -> None:
    source = "<speak>Tom &amp; Jerry, 中文 <!-- x --> café</speak>"
    speech = one(read_ssml(source))
    assert speech.text == "Tom & Jerry, 中文  café"
    assert speech.mapped.source_length == len(source)
    assert source_of(source, speech) == "Tom &amp; Jerry, 中文 <!-- x --> café"
    amp = speech.text.index("&")
    assert source[slice(*speech.mapped.source_span(amp, amp + 1))] == "&amp;"
    cafe = speech.text.index("café")
    assert source[slice(*speech.mapped.source_span(cafe, cafe + 4))] == "café"
    han = speech.text.index("中文")
    assert source[slice(*speech.mapped.source_span(han, han + 2))] == "中文"
    assert not speech.verbatim
    assert speech.voicing == PLAIN
    assert speech.phonemes is None


def test_whitespace_between_elements_is_kept_as_text() -> None:
    document = read_ssml("<speak>\n  <p>One</p>\n  <p>Two</p>\n</speak>")
    assert [item.text for item in document.speech] == ["\n  ", "One", "\n  ", "Two", "\n"]


def test_the_root_must_be_speak() -> None:
    error = refused('<?xml version="1.0"?>\n<text>Hi</text>', "root element must be <speak>")
    assert str(error).startswith("text: SSML line 2, column 1:")


def test_adjacent_runs_that_read_alike_are_one_speech() -> None:
    source = '<speak>a <emphasis level="none">b</emphasis> <lang xml:lang="en">c</lang></speak>'
    document = read_ssml(source)
    assert [item.text for item in document.speech] == ["a b ", "c"]
    assert document.speech[1].lang == "en"


# ---- p, s ------------------------------------------------------------------------------------


def test_paragraphs_and_sentences_end_with_a_boundary() -> None:
    document = read("<p><s>One.</s><s>Two.</s></p><p>Three.</p>")
    kinds = [
        item.kind if isinstance(item, Boundary) else item.text
        for item in document.items
        if isinstance(item, Boundary) or (isinstance(item, Speech) and item.text.strip())
    ]
    # The last sentence's end is the paragraph's end: one boundary, the stronger.
    assert kinds == ["One.", "sentence", "Two.", "paragraph", "Three.", "paragraph"]


def test_a_paragraph_that_starts_after_text_starts_with_a_boundary() -> None:
    document = read("Intro <p>Body</p>")
    assert [type(item).__name__ for item in document.items] == [
        "Speech",
        "Boundary",
        "Speech",
        "Boundary",
    ]
    assert document.items[1] == Boundary("paragraph")
    sentence = read("Intro <s>Body</s>")
    assert sentence.items[1] == Boundary("sentence")


def test_an_empty_paragraph_adds_no_boundary() -> None:
    document = read("<p> </p><p>Text</p>")
    assert [item for item in document.items if isinstance(item, Boundary)] == [
        Boundary("paragraph")
    ]


def test_xml_lang_on_a_paragraph_is_the_language_of_its_text() -> None:
    document = read('<p xml:lang="zh-CN">你好</p>World', xml_lang="en-US")
    hello, world = spoken(document)
    assert (hello.lang, world.lang) == ("zh-CN", "en-US")


# ---- break -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "time_ms"),
    [
        ('time="500ms"', 500),
        ('time="1.5s"', 1500),
        ('time="2s"', 2000),
        ('time="0ms"', 0),
        ('time=" 250 MS "', 250),
        ('time="10s"', 10_000),
        ('time=".25s"', 250),
        ('strength="none"', 0),
        ('strength="x-weak"', 100),
        ('strength="weak"', 250),
        ('strength="medium"', 400),
        ('strength="strong"', 750),
        ('strength="x-strong"', 1200),
        ("", 400),
        ('time="300ms" strength="x-strong"', 300),  # time wins
    ],
)
def test_break_durations(attributes: str, time_ms: int) -> None:
    source = f"<speak>a <break {attributes}/>b</speak>"
    document = read_ssml(source)
    breaks = [item for item in document.items if isinstance(item, Break)]
    assert breaks == [Break(time_ms, source.index("<break"))]
    assert [type(item).__name__ for item in document.items] == ["Speech", "Break", "Speech"]


@pytest.mark.parametrize(
    ("attributes", "match"),
    [
        ('time="10001ms"', "at most 10 s"),
        ('time="11s"', "at most 10 s"),
        ('time="fast"', "a duration such as 500ms"),
        ('time="500"', "a duration such as 500ms"),
        ('time="-1s"', "a duration such as 500ms"),
        ('time="1' + "0" * 400 + 'ms"', "at most 10 s"),
        ('strength="loud"', "none, x-weak, weak, medium, strong or x-strong"),
    ],
)
def test_a_break_that_cannot_be_read_is_refused_with_its_place(attributes: str, match: str) -> None:
    error = refused(f"<speak>\n  a <break {attributes}/></speak>", match)
    assert str(error).startswith("text: SSML line 2, column 5: <break>")


def test_text_inside_a_break_is_not_spoken_and_is_reported() -> None:
    document = read('<break time="1s">oops</break>after')
    assert words(document) == "after"
    assert [warning.code for warning in document.warnings] == ["ignored-content"]


# ---- prosody, emphasis, voice ----------------------------------------------------------------


def voicing_of(body: str) -> Voicing:
    return one(read(body)).voicing


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        ("x-slow", 0.5),
        ("slow", 0.75),
        ("medium", 1.0),
        ("default", 1.0),
        ("fast", 1.25),
        ("x-fast", 1.5),
        ("150%", 1.5),
        ("+20%", 1.2),
        ("-10%", 0.9),
        ("1.2", 1.2),
        ("+30.00%", 1.3),
    ],
)
def test_prosody_rate(rate: str, expected: float) -> None:
    assert voicing_of(f'<prosody rate="{rate}">x</prosody>').rate == pytest.approx(expected)


@pytest.mark.parametrize(
    ("volume", "expected_db"),
    [
        ("silent", -96.0),
        ("x-soft", -12.0),
        ("soft", -6.0),
        ("medium", 0.0),
        ("default", 0.0),
        ("loud", 6.0),
        ("x-loud", 12.0),
        ("+6dB", 6.0),
        ("-3dB", -3.0),
        ("-3.5db", -3.5),
        ("+10%", 20 * math.log10(1.1)),
        ("-50%", 20 * math.log10(0.5)),
        ("-100%", -96.0),
        ("50", 20 * math.log10(0.5)),
        ("100", 0.0),
        ("0", -96.0),
    ],
)
def test_prosody_volume(volume: str, expected_db: float) -> None:
    voicing = voicing_of(f'<prosody volume="{volume}">x</prosody>')
    assert voicing.volume_db == pytest.approx(expected_db, abs=1e-5)


@pytest.mark.parametrize(
    ("pitch", "semitones"),
    [
        ("x-low", -6.0),
        ("low", -3.0),
        ("medium", 0.0),
        ("default", 0.0),
        ("high", 3.0),
        ("x-high", 6.0),
        ("+2st", 2.0),
        ("-1.5st", -1.5),
        ("-10%", 12 * math.log2(0.9)),
        ("+5Hz", 12 * math.log2(155 / 150)),
        ("-15Hz", 12 * math.log2(135 / 150)),
        ("200Hz", 12 * math.log2(200 / 150)),
    ],
)
def test_prosody_pitch(pitch: str, semitones: float) -> None:
    voicing = voicing_of(f'<prosody pitch="{pitch}">x</prosody>')
    assert voicing.pitch_semitones == pytest.approx(semitones, abs=1e-5)


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("rate", "fastest"),
        ("rate", "0%"),
        ("rate", "+0.2"),
        ("rate", "-100%"),
        ("rate", "20"),  # a multiplier of 20: over 10
        ("rate", "5dB"),
        ("volume", "+30dB"),
        ("volume", "150"),
        ("volume", "loudest"),
        ("volume", "+2st"),
        ("pitch", "+30st"),
        ("pitch", "2st"),
        ("pitch", "-100%"),
        ("pitch", "squeaky"),
        ("pitch", "+5dB"),
    ],
)
def test_a_prosody_value_that_cannot_be_read_is_refused(attribute: str, value: str) -> None:
    error = refused(f'<speak><prosody {attribute}="{value}">x</prosody></speak>', attribute)
    expected = f'text: SSML line 1, column 8: <prosody> {attribute}="{value}"'
    assert str(error).startswith(expected)


def test_nested_prosody_multiplies_rates_and_adds_decibels_and_semitones() -> None:
    document = read(
        '<prosody rate="slow" volume="+6dB" pitch="+2st">a '
        '<prosody rate="x-fast" volume="-3dB" pitch="low">b</prosody> c</prosody>'
    )
    outer, inner, after = spoken(document)
    assert outer.voicing == Voicing(rate=0.75, volume_db=6.0, pitch_semitones=2.0)
    assert inner.voicing == Voicing(rate=1.125, volume_db=3.0, pitch_semitones=-1.0)
    assert after.voicing == outer.voicing


def test_gain_stays_above_silence_when_nested() -> None:
    voicing = voicing_of('<prosody volume="silent"><prosody volume="x-soft">x</prosody></prosody>')
    assert voicing.volume_db == -96.0


def test_unsupported_prosody_attributes_are_reported() -> None:
    document = read('<prosody contour="(0%,+20Hz)" duration="2s" rate="fast">x</prosody>')
    assert one(document).voicing.rate == 1.25
    assert sorted(w.message.split('"')[1] for w in document.warnings) == ["contour", "duration"]
    assert {w.code for w in document.warnings} == {"ignored-attribute"}


@pytest.mark.parametrize(
    ("level", "rate", "volume_db"),
    [
        ("strong", 0.9, 4.0),
        ("moderate", 0.95, 2.0),
        ("none", 1.0, 0.0),
        ("reduced", 1.1, -4.0),
        (None, 0.95, 2.0),
    ],
)
def test_emphasis_levels(level: str | None, rate: float, volume_db: float) -> None:
    attribute = f' level="{level}"' if level else ""
    voicing = voicing_of(f"<emphasis{attribute}>x</emphasis>")
    assert (voicing.rate, voicing.volume_db) == (rate, volume_db)


def test_an_unknown_emphasis_level_is_refused() -> None:
    refused('<speak><emphasis level="huge">x</emphasis></speak>', "strong, moderate, none")


def test_emphasis_inside_prosody_combines() -> None:
    voicing = voicing_of('<prosody rate="fast"><emphasis level="strong">x</emphasis></prosody>')
    assert voicing.rate == pytest.approx(1.125)
    assert voicing.volume_db == 4.0


def test_voice_names_the_voice_of_its_content() -> None:
    document = read('a <voice name="en-gb">b <voice name="kokoro:af_heart">c</voice> d</voice> e')
    assert [(item.text.strip(), item.voicing.voice) for item in spoken(document)] == [
        ("a", None),
        ("b", "en-gb"),
        ("c", "kokoro:af_heart"),
        ("d", "en-gb"),
        ("e", None),
    ]
    assert not document.warnings


def test_voice_keeps_the_enclosing_prosody() -> None:
    voicing = voicing_of('<prosody rate="slow"><voice name="cmn">x</voice></prosody>')
    assert voicing == Voicing(voice="cmn", rate=0.75)


def test_a_voice_without_a_name_is_ignored_with_a_warning() -> None:
    document = read('<voice gender="female" xml:lang="fr-FR">Bonjour</voice>')
    speech = one(document)
    assert speech.voicing.voice is None
    assert speech.lang == "fr-FR"  # the language still applies
    (warning,) = document.warnings
    assert warning.code == "ignored-attribute"
    assert "gender" in warning.message
    assert warning.position == len("<speak>")


def test_gender_beside_a_name_is_reported() -> None:
    document = read('<voice name="en-us" gender="male">x</voice>')
    assert one(document).voicing.voice == "en-us"
    assert [w.code for w in document.warnings] == ["ignored-attribute"]


# ---- say-as ------------------------------------------------------------------------------


def say(interpret_as: str, content: str, extra: str = "", **speak_attributes: str) -> Speech:
    document = read(
        f'<say-as interpret-as="{interpret_as}"{extra}>{content}</say-as>', **speak_attributes
    )
    speech = one(document)
    assert speech.verbatim
    return speech


@pytest.mark.parametrize(
    ("interpret_as", "content", "expected"),
    [
        ("characters", "ABC", "A B C"),
        ("characters", "abc", "A B C"),
        ("spell-out", "A1b2", "A one B two"),
        ("characters", "a-b", "A dash B"),
        ("verbatim", "R2D2", "R two D two"),
        ("cardinal", "1234", "one thousand two hundred thirty-four"),
        ("cardinal", "1,234.5", "one thousand two hundred thirty-four point five"),
        ("cardinal", "-3", "minus three"),
        ("number", "10", "ten"),
        ("cardinal", "１２", "twelve"),  # full-width digits
        ("ordinal", "21", "twenty-first"),
        ("ordinal", "3rd", "third"),
        ("ordinal", "12", "twelfth"),
        ("digits", "123", "one two three"),
        ("digits", "1 0-7", "one zero seven"),
        (
            "telephone",
            "+1 (555) 010-9999",
            "plus one, five five five, zero one zero, nine nine nine nine",
        ),
        ("telephone", "1-800-FLOWERS", "one, eight zero zero, F L O W E R S"),
        ("time", "14:30", "fourteen thirty"),
        ("time", "9:05", "nine oh five"),
        ("time", "09:00", "nine o'clock"),
        ("time", "18:00", "eighteen hundred"),
        ("time", "2:30pm", "two thirty P M"),
        ("time", "2:30 p.m.", "two thirty P M"),
        ("time", "12:00 AM", "twelve A M"),
        ("time", "7 am", "seven A M"),
        ("time", "10:30:15", "ten thirty and fifteen seconds"),
    ],
)
def test_say_as_in_english(interpret_as: str, content: str, expected: str) -> None:
    assert say(interpret_as, content).text == expected


def test_say_as_time_with_a_twelve_hour_format() -> None:
    assert say("time", "14:30", ' format="hms12"').text == "two thirty P M"
    assert say("time", "2:30pm", ' format="hms24"').text == "two thirty P M"


@pytest.mark.parametrize(
    ("content", "date_format", "expected"),
    [
        ("2024-05-06", None, "May sixth, twenty twenty-four"),
        ("20240506", None, "May sixth, twenty twenty-four"),
        ("05/06/2024", "mdy", "May sixth, twenty twenty-four"),
        ("06/05/2024", "dmy", "May sixth, twenty twenty-four"),
        ("2024.05.06", "ymd", "May sixth, twenty twenty-four"),
        ("1960-09-10", "yyyymmdd", "September tenth, nineteen sixty"),
        ("10-12-2016", "dmy", "December tenth, twenty sixteen"),
        ("05/06", "md", "May sixth"),
        ("06/05", "dm", "May sixth"),
        ("2024-05", "ym", "May twenty twenty-four"),
        ("05/2024", "my", "May twenty twenty-four"),
        ("1999", "y", "nineteen ninety-nine"),
        ("6", "d", "the sixth"),
        ("5", "m", "May"),
        ("May 6, 2024", "mdy", "May sixth, twenty twenty-four"),
        ("6 Sept 2024", "dmy", "September sixth, twenty twenty-four"),
        ("02/29/2024", "mdy", "February twenty-ninth, twenty twenty-four"),
        ("10/3/2014", None, "October third, twenty fourteen"),
    ],
)
def test_say_as_date(content: str, date_format: str | None, expected: str) -> None:
    extra = f' format="{date_format}"' if date_format else ""
    assert say("date", content, extra).text == expected


@pytest.mark.parametrize(
    ("interpret_as", "content", "extra", "expected"),
    [
        ("cardinal", "35.5", "", "三十五点五"),
        ("cardinal", "-20000", "", "负二万"),
        ("ordinal", "21", "", "第二十一"),
        ("digits", "2024", "", "二零二四"),
        ("date", "2024-05-06", "", "二零二四年五月六日"),
        ("date", "05-06", ' format="md"', "五月六日"),
        ("time", "14:30", "", "十四点三十分"),
        ("time", "2:05pm", "", "下午两点零五分"),
        ("telephone", "138-0013-8000", "", "一三八，零零一三，八零零零"),
        ("characters", "AB1中", "", "A B 一中"),
    ],
)
def test_say_as_in_chinese(interpret_as: str, content: str, extra: str, expected: str) -> None:
    speech = say(interpret_as, content, extra, xml_lang="zh-CN")
    assert speech.text == expected
    assert speech.lang == "zh-CN"


def test_say_as_language_comes_from_the_content_script_or_the_text_around_it() -> None:
    assert say("cardinal", "12").text == "twelve"
    document = read('我有<say-as interpret-as="cardinal">12</say-as>个')
    assert [item.text for item in spoken(document)] == ["我有", "十二", "个"]
    document = read('<say-as interpret-as="ordinal">3</say-as>名')
    assert spoken(document)[0].text == "第三"
    document = read('I have <say-as interpret-as="cardinal">12</say-as>个')
    assert spoken(document)[1].text == "twelve"  # the nearest letter before it is Latin


def test_say_as_in_another_language_reads_english_and_says_so() -> None:
    document = read('<say-as interpret-as="cardinal">12</say-as>', xml_lang="fr-FR")
    assert one(document).text == "twelve"
    assert [w.code for w in document.warnings] == ["unsupported-language"]


def test_say_as_words_are_spaced_from_letters_around_them() -> None:
    document = read('Call<say-as interpret-as="digits">12</say-as>now')
    assert [item.text for item in spoken(document)] == ["Call", " one two ", "now"]
    document = read(
        '<say-as interpret-as="cardinal">1</say-as><say-as interpret-as="cardinal">2</say-as>'
    )
    assert one(document).text == "one two"


def test_say_as_maps_to_the_content_it_reads() -> None:
    source = '<speak>On <say-as interpret-as="date"> 2024-05-06 </say-as>.</speak>'
    speech = spoken(read_ssml(source))[1]
    assert source_of(source, speech) == "2024-05-06"
    # every word of the expansion points at the whole date
    assert source[slice(*speech.mapped.source_span(4, 9))] == "2024-05-06"


def test_spelled_characters_map_one_by_one() -> None:
    source = '<speak><say-as interpret-as="characters">A&amp;B</say-as></speak>'
    speech = one(read_ssml(source))
    assert speech.text == "A and B"
    assert source[slice(*speech.mapped.source_span(0, 1))] == "A"
    assert source[slice(*speech.mapped.source_span(2, 5))] == "&amp;"
    assert source[slice(*speech.mapped.source_span(6, 7))] == "B"


@pytest.mark.parametrize(
    ("interpret_as", "content", "match"),
    [
        ("cardinal", "12a", '"12a" is not a number'),
        ("ordinal", "1.5", "not an ordinal"),
        ("digits", "12b", "not digits"),
        ("date", "2024-02-30", "not a day of that month"),
        ("date", "2023-02-29", "not a day of that month"),
        ("date", "2024-13-01", "not a month"),
        ("date", "0" * 5000 + "1/01/2024", "not a month"),
        ("date", "hello", "not a year"),
        ("time", "25:00", "hour 25 is out of range"),
        ("time", "13:00 pm", "hour 13 is out of range"),
        ("time", "10:61", "from 00 to 59"),
        ("time", "noon", "not a time"),
        ("telephone", "555#123", "'#' is not part of a telephone number"),
        ("telephone", "call me", "has digits"),
    ],
)
def test_say_as_content_that_does_not_fit_is_refused(
    interpret_as: str, content: str, match: str
) -> None:
    error = refused(
        f'<speak>\nSee <say-as interpret-as="{interpret_as}">{content}</say-as></speak>', match
    )
    expected = f'text: SSML line 2, column 5: say-as interpret-as="{interpret_as}"'
    assert str(error).startswith(expected)


def test_date_checks_the_day_against_a_year_given_after_it() -> None:
    refused(
        '<speak><say-as interpret-as="date" format="mdy">02/29/2023</say-as></speak>',
        "day 29 is not in month 2 of 2023",
    )


@pytest.mark.parametrize(
    ("interpret_as", "date_format"), [("date", "qqq"), ("date", "yyd"), ("time", "hms36")]
)
def test_an_unknown_format_is_refused(interpret_as: str, date_format: str) -> None:
    refused(
        f'<speak><say-as interpret-as="{interpret_as}" format="{date_format}">1</say-as></speak>',
        "format",
    )


def test_an_unknown_interpret_as_reads_its_content_as_text_with_a_warning() -> None:
    document = read('<say-as interpret-as="currency">$42.01</say-as>')
    speech = one(document)
    assert speech.text == "$42.01"
    assert not speech.verbatim  # the normalizer reads it like any text
    (warning,) = document.warnings
    assert warning.code == "ignored-attribute"
    assert "currency" in warning.message


def test_say_as_needs_interpret_as() -> None:
    refused("<speak><say-as>12</say-as></speak>", "needs a interpret-as attribute")


def test_markup_inside_say_as_is_ignored_but_its_text_read() -> None:
    document = read('<say-as interpret-as="digits">1<mark name="x"/>2<b>3</b></say-as>')
    assert one(document).text == "one two three"
    assert [w.code for w in document.warnings] == ["ignored-content", "ignored-content"]


def test_a_format_on_a_say_as_that_takes_none_is_reported() -> None:
    document = read('<say-as interpret-as="cardinal" format="ymd">5</say-as>')
    assert one(document).text == "five"
    assert [w.code for w in document.warnings] == ["ignored-attribute"]


# ---- sub, phoneme, mark, lang, audio, desc ---------------------------------------------------


def test_sub_speaks_its_alias_mapped_to_the_whole_element() -> None:
    source = '<speak>The <sub alias="World Wide Web Consortium">W3C</sub> met.</speak>'
    document = read_ssml(source)
    alias = spoken(document)[1]
    assert alias.text == "World Wide Web Consortium"
    assert alias.verbatim
    assert source_of(source, alias) == '<sub alias="World Wide Web Consortium">W3C</sub>'
    assert [item.text for item in spoken(document)] == ["The ", alias.text, " met."]


def test_an_alias_with_digits_is_read_as_words() -> None:
    assert one(read('<sub alias="Web 3">W3</sub>')).text == "Web three"


def test_sub_needs_an_alias() -> None:
    refused("<speak><sub>W3C</sub></speak>", "<sub> needs a alias attribute")
    refused('<speak><sub alias=" ">W3C</sub></speak>', "needs a alias")


@pytest.mark.parametrize(
    ("alphabet", "ph", "ipa", "canonical"),
    [
        ("ipa", "pɪˈkɑːn", "pɪˈkɑːn", "ipa"),
        (None, "pɪˈkɑːn", "pɪˈkɑːn", "ipa"),
        ("x-sampa", 'pi.k"{n', "pi.kˈæn", "x-sampa"),
        ("X-SAMPA", 'pi.k"{n', "pi.kˈæn", "x-sampa"),
        ("xsampa", "t@", "tə", "x-sampa"),
        ("sampa", "t@", "tə", "x-sampa"),
    ],
)
def test_phoneme_carries_ipa_and_its_text_as_the_fallback(
    alphabet: str | None, ph: str, ipa: str, canonical: str
) -> None:
    attribute = f' alphabet="{alphabet}"' if alphabet else ""
    quoted = f"'{ph}'" if '"' in ph else f'"{ph}"'
    source = f"<speak>Say <phoneme{attribute} ph={quoted}>pecan</phoneme> now</speak>"
    document = read_ssml(source)
    speech = spoken(document)[1]
    assert speech.phonemes == Phonemes(ipa, canonical)
    assert speech.text == "pecan"
    assert source_of(source, speech) == "pecan"
    assert not speech.verbatim


def test_phonemes_are_never_merged_with_the_text_around_them() -> None:
    document = read('a<phoneme ph="bi">b</phoneme><phoneme ph="si">c</phoneme>d')
    assert [(item.text, item.phonemes is not None) for item in spoken(document)] == [
        ("a", False),
        ("b", True),
        ("c", True),
        ("d", False),
    ]


@pytest.mark.parametrize(
    ("element", "match"),
    [
        ('<phoneme alphabet="sapi" ph="t ao">tomato</phoneme>', 'alphabet="sapi" is not valid'),
        ("<phoneme>tomato</phoneme>", "needs a ph attribute"),
        ('<phoneme alphabet="x-sampa" ph="t@*">x</phoneme>', r"'\*' .* is not an X-SAMPA symbol"),
        ('<phoneme ph="tøy">x</phoneme>', "IPA symbol 'ø'"),
        ('<phoneme ph="tə"> </phoneme>', "needs its text"),
    ],
)
def test_a_phoneme_that_cannot_be_read_is_refused(element: str, match: str) -> None:
    error = refused(f"<speak>\n {element}</speak>", match)
    assert str(error).startswith("text: SSML line 2, column 2: ")


def test_mark_is_reported_at_its_tag() -> None:
    source = '<speak>Hello <mark name="here"/>world<mark name=" end "></mark></speak>'
    document = read_ssml(source)
    assert [item for item in document.items if isinstance(item, Mark)] == [
        Mark("here", source.index("<mark")),
        Mark("end", source.rindex("<mark")),
    ]
    assert [type(item).__name__ for item in document.items] == ["Speech", "Mark", "Speech", "Mark"]


def test_mark_needs_a_name() -> None:
    refused("<speak><mark/></speak>", "<mark> needs a name attribute")


def test_lang_sets_the_language_of_its_text() -> None:
    document = read('Hi <lang xml:lang="de-DE">Entschuldigung</lang>', xml_lang="en-GB")
    assert [(item.text, item.lang) for item in spoken(document)] == [
        ("Hi ", "en-GB"),
        ("Entschuldigung", "de-DE"),
    ]


def test_lang_needs_a_language_and_a_language_must_look_like_one() -> None:
    refused("<speak><lang>x</lang></speak>", "<lang> needs a xml:lang attribute")
    refused('<speak><p xml:lang="en US!">x</p></speak>', 'xml:lang="en US!" is not a language tag')


def test_audio_speaks_its_fallback_and_drops_its_description() -> None:
    document = read(
        'A <audio src="https://example.com/a.mp3"><desc>a bell</desc>no audio</audio> B'
    )
    assert words(document) == "A no audio B"
    (warning,) = document.warnings
    assert warning.code == "ignored-element"
    assert "<audio>" in warning.message


def test_desc_is_never_spoken() -> None:
    assert words(read("a <desc>hidden</desc>b")) == "a b"


@pytest.mark.parametrize(
    "tag",
    [
        'amazon:effect name="whispered"',
        'amazon:domain name="news"',
        "amazon:auto-breaths",
        'mstts:express-as style="cheerful"',
        'google:style name="lively"',
        "par",
        "seq",
        'media begin="0.5s"',
        "unknown",
        'w role="amazon:VBD"',
    ],
)
def test_vendor_and_unknown_tags_speak_their_content_with_one_warning(tag: str) -> None:
    name = tag.split(maxsplit=1)[0]
    source = f"<speak>Before <{tag}>inside <break time='1s'/>more</{name}> after</speak>"
    document = read_ssml(source)
    assert words(document) == "Before inside more after"
    assert any(isinstance(item, Break) for item in document.items)  # elements inside still work
    (warning,) = document.warnings
    assert (warning.code, warning.position) == ("ignored-element", source.index(f"<{name}"))
    assert f"<{name}>" in warning.message


def test_an_empty_vendor_tag_is_ignored_with_a_warning() -> None:
    document = read('a <mstts:silence type="Sentenceboundary" value="200ms"/>b')
    assert words(document) == "a b"
    assert [w.message for w in document.warnings] == ["<mstts:silence> is not supported: ignored"]


def test_namespace_declarations_and_ids_are_silently_fine() -> None:
    document = read_ssml(
        '<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
        'xmlns:mstts="https://www.w3.org/2001/mstts" xml:lang="en-US">'
        '<p xml:id="first">Hi</p></speak>'
    )
    assert not document.warnings
    assert one(document).lang == "en-US"


def test_an_unknown_attribute_on_a_known_element_is_reported() -> None:
    document = read('<break time="1s" bogus="1"/>x')
    assert [w.message for w in document.warnings] == [
        '<break> attribute "bogus" is not supported: ignored'
    ]


# ---- the vendors' samples --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "said", "vendor_tags"),
    [
        ("polly_whispered.xml", "If you make any noise, she said, they will hear us.", 2),
        ("polly_whispered_prosody.xml", "the sound is slower and quieter", 1),
        ("polly_console.xml", "the 10/3/2014 World Wide Web Consortium meeting", 1),
        ("polly_news_domain.xml", "Paris, the capital of France, announced on Tuesday", 1),
        ("polly_breaths.xml", "Sometimes you want to insert only a single breath.", 4),
        ("polly_tags.xml", "My favorite chemical element is aluminium", 1),
        ("azure_express_as.xml", "I say tomato Let's call the whole thing off!", 2),
        ("azure_roles.xml", "“您来的挺快的，怎么过来的？”", 2),
        ("azure_silence_prosody.xml", "December tenth, twenty sixteen", 3),
        ("google_overview.xml", "Here are S S M L samples.", 0),
        ("google_par.xml", "Who invented the Internet? The Internet was invented by cats.", 5),
        ("google_seq.xml", "Who invented the Internet? The Internet was invented by cats.", 4),
        ("google_say_as.xml", "September tenth, nineteen sixty", 0),
        ("google_style.xml", "Hello I'm so happy today!", 1),
    ],
)
def test_vendor_samples_are_accepted_with_their_vendor_tags_ignored(
    name: str, said: str, vendor_tags: int
) -> None:
    source = (SAMPLES / name).read_text(encoding="utf-8")
    document = read_ssml(source)
    assert said in words(document)
    ignored = [w for w in document.warnings if w.code == "ignored-element"]
    tags = [w for w in ignored if "<audio>" not in w.message and "nested" not in w.message]
    assert len(tags) == vendor_tags, [w.message for w in ignored]
    for speech in document.speech:  # every span slices the source
        start, end = speech.mapped.source_span(0, len(speech.text))
        assert 0 <= start <= end <= len(source)
        if not speech.verbatim and speech.phonemes is None and "&" not in source[start:end]:
            assert "".join(speech.text.split()) in "".join(source[start:end].split()) or (
                "<" in source[start:end]
            )


def test_the_vendor_samples_read_their_elements() -> None:
    tags = read_ssml((SAMPLES / "polly_tags.xml").read_text(encoding="utf-8"))
    first_break = next(item for item in tags.items if isinstance(item, Break))
    assert first_break.time_ms == 3000
    assert any(isinstance(item, Mark) and item.name == "animal" for item in tags.items)
    assert [item.phonemes for item in tags.speech if item.phonemes] == [
        Phonemes("pɪˈkɑːn", "ipa"),
        Phonemes("pi.kˈæn", "x-sampa"),
    ]
    french = next(item for item in tags.speech if item.lang == "fr-FR")
    assert french.text == "Je ne parle pas français."
    azure = read_ssml((SAMPLES / "azure_express_as.xml").read_text(encoding="utf-8"))
    assert {item.voicing.voice for item in spoken(azure)} == {"en-US-AriaNeural", "en-US-GuyNeural"}
    assert {item.lang for item in spoken(azure)} == {"en-US"}


def test_the_azure_sample_with_a_sapi_phoneme_is_refused_naming_it() -> None:
    source = (SAMPLES / "azure_sapi_phoneme.xml").read_text(encoding="utf-8")
    error = refused(source, 'alphabet="sapi" is not valid: ipa or x-sampa')
    assert str(error).startswith("text: SSML line 9, column 15:")


# ---- hostile documents -----------------------------------------------------------------------


def test_billion_laughs_is_refused() -> None:
    source = (
        '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
        ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n'
        ' <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">\n'
        "]>\n<speak>&lol3;</speak>"
    )
    error = refused(source, "DOCTYPE")
    assert str(error).startswith("text: SSML line 2, column 1:")


def test_an_external_entity_is_refused_before_any_file_is_read() -> None:
    source = (
        '<?xml version="1.0"?>\n'
        '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
        "<speak>&xxe;</speak>"
    )
    error = refused(source, "DOCTYPE")
    assert str(error).startswith("text: SSML line 2, column 1:")
    assert "root:" not in str(error)


def test_ten_thousand_nested_elements_are_refused() -> None:
    source = "<speak>" + "<prosody>" * 10_000 + "x" + "</prosody>" * 10_000 + "</speak>"
    error = refused(source, "nested deeper than 64")
    assert str(error).startswith("text: SSML line 1, column ")


def test_too_many_elements_are_refused() -> None:
    source = "<speak>" + "<break/>" * 50_001 + "</speak>"
    refused(source, "more than 50000 elements")


def test_a_ten_megabyte_document_is_refused_as_too_large() -> None:
    source = "<speak>" + "Hello world. " * 800_000 + "</speak>"
    assert len(source) > 10_000_000
    with pytest.raises(
        TextTooLargeError, match=f"longer than {MAX_SSML_CHARS} characters"
    ) as caught:
        read_ssml(source)
    assert str(caught.value).startswith(f"text: SSML line 1, column {MAX_SSML_CHARS + 1}:")
    assert caught.value.field == "text"


def test_an_unclosed_tag_is_refused_with_its_line_and_column() -> None:
    error = refused("<speak>\n  <p>Hello\n  <s>world</p>\n</speak>", "mismatched tag")
    assert str(error).startswith("text: SSML line 3, column 13:")  # at "p" of "</p>"


def test_a_document_cut_short_is_refused() -> None:
    error = refused("<speak>Hello <emphasis>world", "no element found")
    assert str(error).startswith("text: SSML line 1, column ")


def test_errors_can_name_another_field() -> None:
    with pytest.raises(InvalidInputError) as caught:
        read_ssml("<speak><s>Hi</speak>", field="input")
    assert caught.value.field == "input"
    assert str(caught.value) == "input: SSML line 1, column 15: mismatched tag"
    with pytest.raises(TextTooLargeError) as large:
        read_ssml("<speak>" + "a" * 100 + "</speak>", max_chars=50, field="input")
    assert large.value.field == "input"
    assert str(large.value).startswith("input: SSML line 1, column 51:")


def test_the_cap_on_characters_can_be_set_per_call() -> None:
    with pytest.raises(TextTooLargeError):
        read_ssml("<speak>" + "a" * 100 + "</speak>", max_chars=50)
    assert words(read_ssml("<speak>ok</speak>", max_chars=50)) == "ok"


# ---- anything else ------------------------------------------------------------------------------

FRAGMENTS = (
    "<p>", "</p>", "<s>", "</s>", '<break time="{n}ms"/>', '<break strength="strong"/>',
    '<break time="1' + "0" * 400 + 's"/>', '<prosody rate="1' + "0" * 400 + '%">', "</prosody>",
    '<prosody volume="+1' + "0" * 400 + 'dB" pitch="-1' + "0" * 400 + 'Hz">', "</prosody>",
    '<prosody rate="{rate}">', "</prosody>", '<say-as interpret-as="{kind}">{content}</say-as>',
    '<sub alias="x {n}">y</sub>', '<phoneme ph="təˈmeɪtoʊ">t</phoneme>', '<mark name="m{n}"/>',
    '<voice name="en-gb">', "</voice>", "<emphasis>", "</emphasis>", "hello ", "中文", "&amp;",
    " 12 ", "\r\n", "<!-- c -->", "<![CDATA[<x>]]>", "&#" + "0" * 5000 + "65;",
    "<amazon:effect>", "</amazon:effect>",
    '<audio src="x">fallback</audio>', "<desc>d</desc>", '<lang xml:lang="zh">', "</lang>", "é😀",
)  # fmt: skip
KINDS = ("characters", "cardinal", "ordinal", "digits", "date", "time", "telephone", "currency")
CONTENTS = (
    "0000-01-01", "2024-02-29", "0:00", "12:00 am", "+", "1", "A", "", "  ", "９", "½",
    "1/2/3", "99999999999999999999", "-0", "2024-5-6", "13:60", "Jan 1 0000", "0/0/0", "٣",
    "9" * 5000, "1." + "9" * 5000, "9" * 5000 + "/1/2000",
)  # fmt: skip


def test_any_mix_of_elements_reads_or_is_refused_and_spans_stay_in_the_source() -> None:
    rng = random.Random(20)
    for _ in range(1500):
        parts = []
        for _ in range(rng.randint(0, 12)):
            fragment = rng.choice(FRAGMENTS)
            fragment = fragment.replace("{n}", str(rng.randint(0, 20_000)))
            fragment = fragment.replace("{rate}", rng.choice(["fast", "150%", "x", "1.2", "0"]))
            fragment = fragment.replace("{kind}", rng.choice(KINDS))
            parts.append(fragment.replace("{content}", rng.choice(CONTENTS)))
        source = "<speak>" + "".join(parts) + "</speak>"
        try:
            document = read_ssml(source)
        except InvalidInputError as error:
            assert str(error).startswith("text: SSML line "), source
            continue
        for speech in document.speech:
            start, end = speech.mapped.source_span(0, len(speech.text))
            assert 0 <= start <= end <= len(source), source


@pytest.mark.parametrize(
    "source",
    [
        '<!DOCTYPE speak [<!ENTITY a "b">]><speak>&a;</speak>',
        "<speak>" + "<s>" * 100 + "x" + "</s>" * 100 + "</speak>",
        "<speak><s>Hello</speak>",
        "<speak>&nbsp;</speak>",
    ],
)
def test_what_cannot_be_read_at_all_is_a_malformed_request(source: str) -> None:
    """Not well-formed or hostile: 400 (``malformed_request``), where a document that reads
    but asks for something invalid is 422 (``invalid_input``)."""
    with pytest.raises(MalformedRequestError) as caught:
        read_ssml(source)
    assert caught.value.http_status == 400 and caught.value.field == "text"
    with pytest.raises(InvalidInputError) as invalid:
        read_ssml('<speak><break time="soon"/></speak>')
    assert not isinstance(invalid.value, MalformedRequestError)
