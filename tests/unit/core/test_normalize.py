"""normalize_text: each category read in English and Chinese, and where each reading came from
(the span of the input it maps back to)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from voicelane.core.normalize import Lang, normalize_text
from voicelane.core.normalize.numbers import en_plural, roman_value

DATA = Path(__file__).parents[2] / "data" / "text_normalization.jsonl"
LEFTOVER = re.compile(r"[0-9$€£¥%+=<>@#&/\\^~|°℃℉]")


def said(text: str, lang: Lang = "auto") -> str:
    return normalize_text(text, lang=lang).text


def source_of(text: str, words: str, *, lang: Lang = "auto") -> str:
    """The part of ``text`` that ``words`` (a run of the normalized text) was read from."""
    mapped = normalize_text(text, lang=lang)
    at = mapped.text.index(words)
    start, end = mapped.source_span(at, at + len(words))
    return text[start:end]


# --- the test set -----------------------------------------------------------------------------


def _rows() -> list[dict[str, object]]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]


def test_no_sentence_of_the_set_keeps_a_digit_or_symbol() -> None:
    left = [r["id"] for r in _rows() if LEFTOVER.search(said(str(r["text"])))]
    assert left == []


def test_the_set_covers_every_category_of_the_issue() -> None:
    categories = {str(r["category"]) for r in _rows()}
    assert {
        "cardinal", "decimal", "fraction", "ordinal", "money", "percent", "date", "time",
        "range", "phone", "unit", "temperature", "year", "roman", "url", "email",
        "abbreviation", "symbol", "version", "mixed_alnum",
    } <= categories  # fmt: skip


# --- ranges -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It was 40–60°C.", "It was forty to sixty degrees Celsius."),
        ("Rest 3-5 days.", "Rest three to five days."),
        ("Wait 10~20 minutes.", "Wait ten to twenty minutes."),
        ("From 1990–2000 we lived there.", "From nineteen ninety to two thousand we lived there."),
        ("Prices rose 5-10%.", "Prices rose five to ten percent."),
        ("Rates rose 25%-30%.", "Rates rose twenty-five percent to thirty percent."),
        ("It costs $100-$200.", "It costs one hundred dollars to two hundred dollars."),
        ("Open 9am-5pm.", "Open nine am to five pm."),
        ("Ages 3 – 5.", "Ages three to five."),
        ("It was a 3-year-old car.", "It was a three-year-old car."),
        ("The score was 10 - 3 = 7.", "The score was ten minus three equals seven."),
        ("The ratio is 3:2.", "The ratio is three to two."),
        ("Carry 1kg-2kg.", "Carry one kilogram to two kilograms."),
        ("An x86-64 CPU", "An x eighty-six-sixty-four CPU"),
    ],
)
def test_english_ranges(text: str, expected: str) -> None:
    assert said(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("气温在20-25度之间。", "气温在二十到二十五度之间。"),
        ("营业时间9:00-18:00。", "营业时间九点到十八点。"),
        ("预算为5万~8万元。", "预算为五万到八万元。"),
        ("2020-2022年疫情严重。", "二零二零到二零二二年疫情严重。"),
        ("每次服用1-2片。", "每次服用一到两片。"),
        ("口算：10-3=7", "口算：十减三等于七"),
        ("比分3:2。", "比分三比二。"),
        ("温度范围是-10℃~40℃。", "温度范围是零下十摄氏度到四十摄氏度。"),
    ],
)
def test_chinese_ranges(text: str, expected: str) -> None:
    assert said(text) == expected


def test_a_range_maps_each_side_and_the_dash_to_its_own_span() -> None:
    text = "It was 40–60°C."
    assert source_of(text, "forty") == "40"
    assert source_of(text, "to") == "–"
    assert source_of(text, "sixty degrees Celsius") == "60°C"


# --- units and temperatures ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5 km", "five kilometers"),
        ("1 km", "one kilometer"),
        ("2 kg and 1 g and 500 mg", "two kilograms and one gram and five hundred milligrams"),
        ("180cm, 5 mm, 30 m", "one hundred eighty centimeters, five millimeters, thirty meters"),
        (
            "200 km/h, 60 mph, 5 m/s",
            "two hundred kilometers per hour, sixty miles per hour, five meters per second",
        ),
        (
            "3.2 GB, 512 MB, 64 KB, 2 TB",
            "three point two gigabytes, five hundred twelve "
            "megabytes, sixty-four kilobytes, two terabytes",
        ),
        (
            "3.5 GHz, 800 MHz, 50 Hz",
            "three point five gigahertz, eight hundred megahertz, fifty hertz",
        ),
        (
            "5 kW, 60 W, 12 V, 5000 mAh",
            "five kilowatts, sixty watts, twelve volts, five thousand milliamp hours",
        ),
        (
            "200 ms, 30 s, 15 min, 2 h",
            "two hundred milliseconds, thirty seconds, fifteen minutes, two hours",
        ),
        ("250 ml and 1 L", "two hundred fifty milliliters and one liter"),
        ("6 ft", "six feet"),
        ("1 ft", "one foot"),
        ("100 Mbps", "one hundred megabits per second"),
        ("-3°C", "minus three degrees Celsius"),
        ("38.5 °C", "thirty-eight point five degrees Celsius"),
        ("350°F", "three hundred fifty degrees Fahrenheit"),
        ("8℃", "eight degrees Celsius"),
        ("75°", "seventy-five degrees"),
        ("5'6\" tall", "five feet six inches tall"),
    ],
)
def test_english_units_and_temperatures(text: str, expected: str) -> None:
    assert said(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("重5kg。", "重五千克。"),
        ("跑了2公里。", "跑了两公里。"),
        ("车速120km/h。", "车速一百二十公里每小时。"),
        ("身高180cm。", "身高一百八十厘米。"),
        ("面积20㎡。", "面积二十平方米。"),
        ("今天35℃。", "今天三十五摄氏度。"),
        ("气温-5°C。", "气温零下五摄氏度。"),
        ("下载速度10MB/s。", "下载速度十MB每秒。"),
        ("一个500GB的盘。", "一个五百GB的盘。"),
        ("每斤5元/斤。", "每斤五元每斤。"),
    ],
)
def test_chinese_units_and_temperatures(text: str, expected: str) -> None:
    assert said(text) == expected


def test_a_number_and_its_unit_are_one_span() -> None:
    assert source_of("Heat to -3°C now.", "minus three degrees Celsius") == "-3°C"
    assert source_of("重5kg。", "五千克") == "5kg"
    assert source_of("Go 200 km/h.", "kilometers per hour") == "200 km/h"


def test_letters_that_are_not_units_stay() -> None:
    assert said("5G and 4K and A4 and MP3") == "five G and four K and A four and MP three"


# --- URLs and e-mail --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Visit example.com now.", "Visit example dot com now."),
        ("Visit https://example.com/docs now.", "Visit example dot com slash docs now."),
        ("Go to www.voicelane.io today.", "Go to w w w dot voicelane dot i o today."),
        ("See docs.python.org/3/.", "See docs dot python dot org slash three slash."),
        ("Mail john.doe@example.com.", "Mail john dot doe at example dot com."),
        ("Mail bob123@mail.com.", "Mail bob one two three at mail dot com."),
        ("Mail hr@company.co.uk.", "Mail hr at company dot co dot u k."),
        ("请访问www.example.com了解详情。", "请访问w w w点example点com了解详情。"),
        ("代码在github.com/acme/tts上。", "代码在github点com斜杠acme斜杠tts上。"),
        ("发邮件到zhang.san@example.com。", "发邮件到zhang点san艾特example点com。"),
        ("访问163.com。", "访问一六三点com。"),
    ],
)
def test_urls_and_email_addresses_are_read_part_by_part(text: str, expected: str) -> None:
    assert said(text) == expected


def test_an_address_is_one_span() -> None:
    text = "Mail john@example.com now."
    assert source_of(text, "john at example dot com") == "john@example.com"
    assert source_of(text, "dot") == "john@example.com"
    url = "See https://example.com/a now."
    assert source_of(url, "example dot com slash a") == "https://example.com/a"


@pytest.mark.parametrize(
    "text", ["Use e.g. this.", "It is the U.S. economy.", "Run Node.js or main.py.", "3.14"]
)
def test_dotted_words_that_are_not_addresses(text: str) -> None:
    assert " dot " not in said(text)


# --- Roman numerals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("World War II ended.", "World War two ended."),
        ("World War I began.", "World War one began."),
        ("Read Chapter IX.", "Read Chapter nine."),
        ("See Appendix III.", "See Appendix three."),
        ("Super Bowl LVIII", "Super Bowl fifty-eight"),
        ("Rocky IV", "Rocky four"),
        ("Henry VIII had six wives.", "Henry the eighth had six wives."),
        ("King Louis XIV built it.", "King Louis the fourteenth built it."),
        ("Pope John Paul II came.", "Pope John Paul the second came."),
        ("Queen Elizabeth I ruled.", "Queen Elizabeth the first ruled."),
        ("Louis XIV's palace", "Louis the fourteenth's palace"),
        ("《Final Fantasy VII》", "《Final Fantasy seven》"),
    ],
)
def test_roman_numerals_after_a_title_word(text: str, expected: str) -> None:
    assert said(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I am here.",
        "Henry I said no.",
        "MIX the paint.",
        "Send your CV and a CD to Washington DC.",
        "Malcolm X spoke.",
        "Take Vitamin C and see Appendix C.",
        "DIM the lights.",
    ],
)
def test_words_that_look_like_roman_numerals_stay(text: str) -> None:
    assert said(text) == text


def test_only_the_numeral_is_replaced() -> None:
    text = "World War II ended."
    assert source_of(text, "two") == "II"
    assert source_of(text, "World War") == "World War"


def test_roman_values() -> None:
    assert [roman_value(n) for n in ("IV", "XIV", "LVIII", "MCMXCIX", "ABC")] == [
        4, 14, 58, 1999, 0,
    ]  # fmt: skip


# --- versions and addresses of machines -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Install v1.2.3 now.", "Install v one point two point three now."),
        ("Version 2.0.1 fixes it.", "Version two point zero point one fixes it."),
        ("Node 20.11.1 is required.", "Node twenty point eleven point one is required."),
        ("Upgrade to Python 3.11 today.", "Upgrade to Python three point eleven today."),
        ("Ubuntu 22.04", "Ubuntu twenty-two point oh four"),
        ("The ratio is 3.11 today.", "The ratio is three point one one today."),
        (
            "The IP is 192.168.1.1.",
            "The IP is one hundred ninety-two dot one hundred sixty-eight dot one dot one.",
        ),
        ("请升级到3.2.1版本。", "请升级到三点二点一版本。"),
        ("这个bug在v2.3.1里修复了。", "这个bug在v二点三点一里修复了。"),
    ],
)
def test_versions(text: str, expected: str) -> None:
    assert said(text) == expected


# --- dates ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("on 05/06/2024", "on May sixth, twenty twenty-four"),
        ("on 13/06/2024", "on June thirteenth, twenty twenty-four"),
        ("on 06.05.2024", "on May sixth, twenty twenty-four"),
        ("on 6 May 2024", "on the sixth of May twenty twenty-four"),
        ("on May 6, 2024", "on May sixth, twenty twenty-four"),
        ("on 2024/05/06", "on May sixth, twenty twenty-four"),
        ("on 2024.05.06", "on May sixth, twenty twenty-four"),
        ("on Jan. 5", "on January fifth"),
        ("on Sept. 3, 2021", "on September third, twenty twenty-one"),
        (
            "Jan. and Feb. were cold, unlike Dec.",
            "January and February were cold, unlike December.",
        ),
        ("in March 2020", "in March twenty twenty"),
        ("in the 1990s and the '80s", "in the nineteen nineties and the eighties"),
        ("日期：2024.03.01", "日期：二零二四年三月一日"),
        ("截止2025/01/10。", "截止二零二五年一月十日。"),
        ("今天是May 6th，走吧。", "今天是May sixth，走吧。"),
    ],
)
def test_dates(text: str, expected: str) -> None:
    assert said(text) == expected


def test_a_date_is_one_span() -> None:
    text = "Born on May 6, 2024 in Ohio."
    assert source_of(text, "May sixth, twenty twenty-four") == "May 6, 2024"


def test_plural_number_words() -> None:
    assert en_plural("nineteen ninety") == "nineteen nineties"
    assert en_plural("two thousand") == "two thousands"
    assert en_plural("six") == "sixes"


# --- money ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$3.50", "three dollars and fifty cents"),
        ("$1,299.99", "one thousand two hundred ninety-nine dollars and ninety-nine cents"),
        ("$0.75", "seventy-five cents"),
        ("$0.01", "one cent"),
        ("$1.00", "one dollar"),
        ("€2.05", "two euros and five cents"),
        ("£12.50", "twelve pounds fifty"),
        ("£0.99", "ninety-nine pence"),
        ("$3.5M", "three point five million dollars"),
        ("¥1,500 in Tokyo", "one thousand five hundred yen in Tokyo"),
        ("¥60 in Shanghai", "sixty yuan in Shanghai"),
        ("欧洲游花费€2000。", "欧洲游花费两千欧元。"),
    ],
)
def test_money(text: str, expected: str) -> None:
    assert said(text) == expected


# --- abbreviations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith is in.", "Doctor Smith is in."),
        ("Mr. Lee and Mrs. Park", "Mister Lee and Missus Park"),
        ("Prof. Chen teaches.", "Professor Chen teaches."),
        ("She grew up in St. Louis.", "She grew up in Saint Louis."),
        ("Meet me on Main St. at noon.", "Meet me on Main Street at noon."),
        ("Meet me on Main St. Then go.", "Meet me on Main Street. Then go."),
        ("Lakers vs. Celtics", "Lakers versus Celtics"),
        ("Approx. forty people", "Approximately forty people"),
        ("Bring snacks, drinks, etc.", "Bring snacks, drinks, et cetera."),
        ("tools, e.g. hammers, i.e. heavy", "tools, for example hammers, that is heavy"),
        ("See No. 7 on p. 12.", "See number seven on page twelve."),
        ("我们和Dr. Wang开会。", "我们和Doctor Wang开会。"),
    ],
)
def test_abbreviations(text: str, expected: str) -> None:
    assert said(text) == expected


def test_an_abbreviation_that_ends_the_sentence_keeps_its_period_out_of_the_span() -> None:
    text = "Bring pens, etc. Then go."
    mapped = normalize_text(text)
    assert mapped.text == "Bring pens, et cetera. Then go."
    assert source_of(text, "et cetera") == "etc"
    assert source_of(text, "cetera.") == "etc."  # the period maps to itself


# --- phones, codes, symbols -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dial 911 now.", "Dial nine one one now."),
        ("Call 212-555-0147.", "Call two one two five five five zero one four seven."),
        ("Call 1-800-555-1234.", "Call one eight zero zero five five five one two three four."),
        ("Call (800) 555-0123.", "Call eight zero zero five five five zero one two three."),
        ("Ring 020 7123 4567.", "Ring zero two zero seven one two three four five six seven."),
        ("请拨110。", "请拨一一零。"),
        ("电话400-820-8820。", "电话四零零八二零八八二零。"),
        ("电话：010-62345678。", "电话：零一零六二三四五六七八。"),
        ("联系电话（021）5555-0101。", "联系电话零二一五五五五零一零一。"),
        ("My flight is UA857.", "My flight is UA eight five seven."),
        ("我的航班是CA1234。", "我的航班是CA一二三四。"),
        ("订单号：A20240506。", "订单号：A二零二四零五零六。"),
        ("Room 007", "Room zero zero seven"),
        ("The 100-1000 range", "The one hundred to one thousand range"),
    ],
)
def test_phone_numbers_and_codes_digit_by_digit(text: str, expected: str) -> None:
    assert said(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("If x > 5, stop.", "If x greater than five, stop."),
        ("Check that 10 < 20.", "Check that ten less than twenty."),
        ("x ≥ 5 and y ≠ 3", "x greater than or equal to five and y is not equal to three"),
        ("Draw a 3 x 4 grid.", "Draw a three by four grid."),
        ("3 x 4 = 12", "three times four equals twelve"),
        ("It is 2x faster.", "It is two times faster."),
        ("Use 0x1F.", "Use zero x one F."),
        ("Press * and then #.", "Press star and then pound."),
        ("Follow #VoiceLane now.", "Follow hashtag VoiceLane now."),
        ("Item #5", "Item number five"),
        ("We ran A/B tests.", "We ran A B tests."),
        ("he/she and w/o sugar", "he or she and without sugar"),
        ("2^10", "two to the power of ten"),
        ("Go 24/7 since 9/11.", "Go twenty-four seven since nine eleven."),
        ("Use 1 1/2 cups or 2½ cups.", "Use one and a half cups or two and a half cups."),
        ("Keep *this* as is.", "Keep *this* as is."),
        ("I code in C# and F#.", "I code in C sharp and F sharp."),
        ("Windows 10 x64", "Windows ten x sixty-four"),
        ("温度>30度时。", "温度大于三十度时。"),
        ("关注#TechNews#获取消息。", "关注话题TechNews获取消息。"),
        ("第2名和2个人，2年级。", "第二名和两个人，二年级。"),
        ("请在5/20前完成。", "请在五月二十日前完成。"),
        ("3D打印和5G网络", "三D打印和五G网络"),
        ("编号：No.007", "编号：number zero zero seven"),
    ],
)
def test_symbols(text: str, expected: str) -> None:
    assert said(text) == expected


def test_a_topic_keeps_its_words_and_drops_the_closing_mark() -> None:
    text = "关注#TechNews#获取"
    assert source_of(text, "话题") == "#"
    assert source_of(text, "TechNews") == "TechNews"


# --- robustness -------------------------------------------------------------------------------

_PIECES = [
    *"0123456789$€£¥%‰+-−–—=@#&/:.,()（）~～×÷½¼¾*^<>≤≥≠≈±°℃℉§©®™№'’xX 年月日元个后第万斤\n",
    "a", "Z", "I", "V", "X", "C", "MIX", "IV", "Chapter ", "King ", "Pope John ", "Henry ",
    "World War ", "May ", "Jan. ", "Dr. ", "St. ", "Mr ", "vs. ", "etc.", "e.g.", "No. ",
    "p. ", "https://", "www.", "example", ".com", ".io", "@", "km", "kg", "°C", "GB", "MB/s",
    "km/h", "㎡", "s", "m", "h", "th", "the ", "dial ", "电话", "v", "Python ", "版本", "你好",
    "😀", "é", "２", "٣", "\u00a0", "\u3000",
]  # fmt: skip


@pytest.mark.parametrize("lang", ["auto", "en", "zh"])
def test_any_text_normalizes_without_error_and_maps_inside_the_input_in_order(
    lang: Lang,
) -> None:
    rnd = random.Random(20)
    for _ in range(1500):
        text = "".join(rnd.choice(_PIECES) for _ in range(rnd.randint(1, 40)))
        mapped = normalize_text(text, lang=lang)
        previous_end = 0
        for piece in mapped.pieces:
            assert previous_end <= piece.src_start <= piece.src_end <= len(text), text
            previous_end = piece.src_end
            if piece.exact:
                source = text[piece.src_start : piece.src_end]
                assert source == mapped.text[piece.out_start : piece.out_end], text


@pytest.mark.parametrize("unit", ["1-", "1/", "a.", "a@", "IV ", "1:", "King ", "9 May "])
def test_long_runs_of_one_pattern_are_read_whole(unit: str) -> None:
    """A long run of the same token (the worst case for a backtracking pattern) comes back
    whole: every input character is covered by exactly one piece, in order."""
    text = unit * 2000
    mapped = normalize_text(text)
    covered = sum(p.src_end - p.src_start for p in mapped.pieces)
    assert covered == len(text)
