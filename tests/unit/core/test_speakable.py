"""Tests for voicelane.core.speakable: markdown/emoji cleaning, streaming and the fast first
fragment."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicelane.core.speakable import Cut, SpeakableStream, clean_for_speech
from voicelane.core.text import contains_cjk, split_sentences

EN_OVERVIEW = """Sure! Here's a quick overview of **Python decorators** 🐍:

## What is a decorator?

A decorator is a function that *wraps* another function. For example, `@functools.cache` \
memoizes results — see the [docs](https://docs.python.org/3/library/functools.html) for details.

```python
@cache
def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)
```

1. **Define** the wrapper.
2. Return it from the outer function.

> Tip: use `functools.wraps`!

| Name | Use |
|------|-----|
| cache | memoize |

---

Hope this helps! 😊👍🏽"""

EN_STEPS = (
    "Here are the steps, Dr. Smith:\n\n"
    "- [x] Install the package (v2.3.1) from https://pypi.org/project/x/.\n"
    "- [ ] Run `pip install -e .` in the repo\n"
    "  * Nested: use snake_case names, e.g. my_var_name\n"
    "+ Check ![diagram](img/arch.png) and <b>bold</b> tags<br>too.\n\n"
    "The result is 3.14 × 2 = 6.28, i.e. about 2 * 3.\n\n\n\n"
    "~~Old text~~ __New__ _text_ ✅ 🇺🇸 1️⃣ done."
)

ZH_QUICKSORT = """好的，我来帮你解释一下**快速排序**算法 🚀。

### 基本思路

1. 选择一个**基准**元素；
2. 把小于基准的放左边，大于的放右边；
3. 递归处理两边。

```python
def quick_sort(a):
    return a if len(a) < 2 else ...
```

> 注意：最坏情况下时间复杂度是 O(n²)。

详情请看[维基百科](https://zh.wikipedia.org/wiki/快速排序)，或者访问https://example.com。希望对你有帮助！😊"""

ZH_TABLE = (
    "| 名称 | 说明 |\n|:---:|---|\n| `list` | 列表，可变 |\n| `tuple` | 元组，不可变 |\n\n"
    "总结：\n- 列表用 `[]` 表示\n- 元组用 `()` 表示 👨‍👩‍👧‍👦\n\n***\n还有问题吗？"
)

MARKUP_ONLY = "```bash\nrm -rf build\n```\n\n---\n\n🎉🎉🎉 ![](x.png)\n> \n## "

UNCLOSED = "Here it is:\n````js\nconsole.log(1)\n```\nstill code"

REPLIES = [EN_OVERVIEW, EN_STEPS, ZH_QUICKSORT, ZH_TABLE, MARKUP_ONLY, UNCLOSED]


def stream(deltas: list[str], **kwargs: int) -> list[Cut]:
    """Every cut of a stream fed ``deltas``, the end's included."""
    speakable = SpeakableStream(**kwargs)
    cuts = [speakable.feed(d) for d in deltas]
    cuts.append(speakable.end())
    assert speakable.spoken == "".join(c.text for c in cuts)
    return cuts


def texts(deltas: list[str], **kwargs: int) -> list[tuple[str, bool]]:
    return [(c.text, c.flush) for c in stream(deltas, **kwargs)]


def spoken_at_flush(deltas: list[str], **kwargs: int) -> str | None:
    """The spoken text when the (only) flush came, or None without one."""
    spoken = ""
    for cut in stream(deltas, **kwargs):
        spoken += cut.text
        if cut.flush:
            return spoken
    return None


def split_at(text: str, cuts: set[int]) -> list[str]:
    """``text`` cut into deltas at the offsets in ``cuts`` (those inside the text)."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


def weight(text: str) -> int:
    return sum(2 if contains_cjk(c) else 1 for c in text if not c.isspace())


# --- markdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        # emphasis
        ("This is **bold** and __bold__.", "This is bold and bold."),
        ("This is *italic* and _italic_.", "This is italic and italic."),
        ("***both*** and ~~struck~~ out", "both and struck out"),
        ("这是**重点**内容", "这是重点内容"),
        ("**Note:**text", "Note:text"),
        ("snake_case and my_var_name stay", "snake_case and my_var_name stay"),
        ("2 * 3 = 6, 2*3 = 6, 2 ** 8", "2 * 3 = 6, 2*3 = 6, 2 ** 8"),
        ("about ~5 minutes", "about ~5 minutes"),
        ("a lone * star and trailing*", "a lone * star and trailing"),
        ("\\*not emphasis\\*", "*not emphasis*"),
        # headers, quotes, bullets
        ("# Title\n## Sub title\n###### Six", "Title\nSub title\nSix"),
        ("#hashtag and C# and ####### seven", "#hashtag and C# and ####### seven"),
        ("> quoted\n> > nested", "quoted\nnested"),
        ("- one\n* two\n+ three", "one\ntwo\nthree"),
        ("  - nested\n    * deeper", "nested\ndeeper"),
        ("- [x] done\n- [ ] todo", "done\ntodo"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("-5 degrees", "-5 degrees"),
        ("> - **quoted item**", "quoted item"),
        # code
        ("Use `pip install -e .` here", "Use pip install -e . here"),
        ("Call ``a`b`` now", "Call a`b now"),
        ("a stray ` backtick", "a stray backtick"),
        # links, images, URLs
        ("See [the docs](https://a.io/x) now", "See the docs now"),
        ("[**bold** link](u) and [x](y (title))", "bold link and x"),
        ("[Python](https://en.wikipedia.org/wiki/Python_(language)).", "Python."),
        ("[not a link] and [also not](", "[not a link] and [also not]("),
        ("Look: ![a cat](cat.png) cute", "Look: cute"),
        ("Wow! Great!", "Wow! Great!"),
        ("Visit https://example.com/a_b?x=1. Or http://x.y!", "Visit . Or !"),
        ("(see https://en.wikipedia.org/wiki/X_(y))", "(see )"),
        ("访问https://example.com获取", "访问获取"),
        ("Https://CAPS.example too", "too"),
        ("thttp://x stays", "thttp://x stays"),
        # HTML
        ("<b>bold</b> and <a href='x'>link</a>", "bold and link"),
        ("one<br>two<br/>three", "one two three"),
        ("<https://autolink.io> done", "done"),
        ("a < b, x<3 and c > d", "a < b, x<3 and c > d"),
        # tables and rules
        ("| a | b |\n|---|:---:|\n| 1 | 2 |", "a b\n1 2"),
        ("Title\n===\nText", "Title\nText"),
        ("one\n\n---\n\ntwo\n\n* * *\n\nthree\n___", "one\n\ntwo\n\nthree"),
    ],
)
def test_markdown_is_stripped(raw: str, spoken: str) -> None:
    assert clean_for_speech(raw) == spoken


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("Here:\n```\nx = 1\n```\nDone.", "Here:\nDone."),
        ("Here:\n\n```python\nprint('hi')\n\n```\n\nDone.", "Here:\n\nDone."),
        ("  ```bash\n  ls\n  ```\nafter", "after"),
        ("````md\n```\ninner\n```\n````\nafter", "after"),
        ("Here:\n```js\nconsole.log(1)\nno end", "Here:"),
        ("```python print(1)``` inline", "python print(1) inline"),
    ],
)
def test_code_blocks_are_dropped(raw: str, spoken: str) -> None:
    assert clean_for_speech(raw) == spoken


# --- emoji --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("Great job 🎉!", "Great job !"),
        ("Hello 👋 world 😀😃", "Hello world"),
        ("family 👨\u200d👩\u200d👧\u200d👦 here", "family here"),
        ("coder 🧑🏽\u200d💻 and 👍🏿", "coder and"),
        (
            "flags 🇺🇸🇨🇳 and 🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
            "flags and",
        ),
        ("I ❤️ it ☀️ ✅ ✨ ⭐ ⏰ ⌚", "I it"),
        ("1️⃣ one #️⃣ two *️⃣ three", "one two three"),
        ("🏳️\u200d🌈 pride", "pride"),
        ("version 1 and #1", "version 1 and #1"),
        ("好的👍，我来🚀！", "好的，我来！"),
    ],
)
def test_emoji_are_removed(raw: str, spoken: str) -> None:
    assert clean_for_speech(raw) == spoken


def test_cjk_text_and_punctuation_are_untouched() -> None:
    text = "中文，“引号”。《书名》【括号】「日本語」『かな』カタカナ、全角：（）！？；…㊗〽"
    assert clean_for_speech(text) == text


# --- whitespace ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "spoken"),
    [
        ("\n\n   Hello   there  \n", "Hello there"),
        ("one\ntwo", "one\ntwo"),
        ("one\n\n\n\n\ntwo", "one\n\ntwo"),
        ("one  \n  \n two", "one\n\ntwo"),
        ("tab\tand\u00a0nbsp", "tab and nbsp"),
        ("crlf\r\n---\r\nline", "crlf\nline"),
        ("🎉\nHello", "Hello"),
    ],
)
def test_whitespace(raw: str, spoken: str) -> None:
    assert clean_for_speech(raw) == spoken


@pytest.mark.parametrize(
    "raw", [MARKUP_ONLY, "", "   \n\n", "😀👍🏽", "```\ncode\n```", "---\n***"]
)
def test_a_markup_only_reply_says_nothing(raw: str) -> None:
    assert clean_for_speech(raw) == ""
    cuts = stream(list(raw))
    assert "".join(c.text for c in cuts) == ""
    assert not any(c.flush for c in cuts)


def test_whole_replies() -> None:
    assert clean_for_speech(EN_OVERVIEW) == (
        "Sure! Here's a quick overview of Python decorators :\n\n"
        "What is a decorator?\n\n"
        "A decorator is a function that wraps another function. For example, "
        "@functools.cache memoizes results — see the docs for details.\n\n"
        "1. Define the wrapper.\n2. Return it from the outer function.\n\n"
        "Tip: use functools.wraps!\n\n"
        "Name Use\ncache memoize\n\n"
        "Hope this helps!"
    )
    assert clean_for_speech(EN_STEPS) == (
        "Here are the steps, Dr. Smith:\n\n"
        "Install the package (v2.3.1) from .\n"
        "Run pip install -e . in the repo\n"
        "Nested: use snake_case names, e.g. my_var_name\n"
        "Check and bold tags too.\n\n"
        "The result is 3.14 × 2 = 6.28, i.e. about 2 * 3.\n\n"
        "Old text New text done."
    )
    assert clean_for_speech(ZH_QUICKSORT) == (
        "好的，我来帮你解释一下快速排序算法 。\n\n"
        "基本思路\n\n"
        "1. 选择一个基准元素；\n2. 把小于基准的放左边，大于的放右边；\n3. 递归处理两边。\n\n"
        "注意：最坏情况下时间复杂度是 O(n²)。\n\n"
        "详情请看维基百科，或者访问。希望对你有帮助！"
    )
    assert clean_for_speech(ZH_TABLE) == (
        "名称 说明\nlist 列表，可变\ntuple 元组，不可变\n\n"
        "总结：\n列表用 [] 表示\n元组用 () 表示\n\n还有问题吗？"
    )
    assert clean_for_speech(UNCLOSED) == "Here it is:"


def test_list_items_and_headers_still_end_sentences() -> None:
    segments = split_sentences(clean_for_speech("## Plan\n- **Buy** milk\n- Call `mom`\n1. Go"))
    assert [s.text for s in segments] == ["Plan", "Buy milk", "Call mom", "1. Go"]


# --- streaming ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deltas", "cuts"),
    [
        # a marker run waits for the character after it
        (["Hello **wor", "ld** and", " more"], ["Hello wor", "ld and", " more", ""]),
        (["a *", "*b*", "* c"], ["a", " b", " c", ""]),
        # a link waits until its destination closes
        (["See [the ", "docs](https://", "x.y/z) now"], ["See", "", " the docs now", ""]),
        # a fence is dropped as its lines arrive; the text after it comes back
        (["Run:\n```", "bash\npip install x\n", "```\nDone."], ["Run:", "", "\nDone.", ""]),
        # a URL in progress
        (["Go to http", "s://a.b/c", " now"], ["Go to", "", " now", ""]),
        # an emoji's ZWJ sequence
        (["Hi 👨", "\u200d👩", "\u200d👧 there"], ["Hi", "", " there", ""]),
        # a keycap's digit waits for the next character
        (["Step 1", "\ufe0f", "\u20e3 go"], ["Step", "", " go", ""]),
        (["Step 1", "0 go"], ["Step", " 10 go", ""]),
        # trailing whitespace waits for text, and is dropped at the end
        (["Hi ", " there  ", "\n"], ["Hi", " there", "", ""]),
    ],
)
def test_only_undecided_text_is_held_back(deltas: list[str], cuts: list[str]) -> None:
    assert [c.text for c in stream(deltas)] == cuts


def test_an_unclosed_fence_is_dropped_at_the_end() -> None:
    cuts = stream(["Code:\n", "```py\n", "x = 1\n", "y = 2"])
    assert [c.text for c in cuts] == ["Code:", "", "", "", ""]


@pytest.mark.parametrize("reply", REPLIES)
def test_one_character_deltas_say_the_same(reply: str) -> None:
    assert "".join(c.text for c in stream(list(reply))) == clean_for_speech(reply)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_says_the_same(data: st.DataObject) -> None:
    reply = data.draw(st.sampled_from(REPLIES))
    cuts = data.draw(st.sets(st.integers(1, len(reply) - 1), max_size=len(reply)))
    result = stream(split_at(reply, cuts))
    assert "".join(c.text for c in result) == clean_for_speech(reply)
    assert sum(c.flush for c in result) <= 1


SOUP = st.lists(
    st.sampled_from(
        [
            *"ab1 \n*_~`[]()!<>/|#:.,h-+=\\",
            *["http", "://", "```", "👍", "\u200d", "\ufe0f", "\u20e3"],
            *["中", "，", "。", "Dr.", "3.1"],
        ]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=SOUP, data=st.data())
def test_any_split_of_markup_soup_says_the_same(text: str, data: st.DataObject) -> None:
    """Random mixes of markup fragments: streaming never disagrees with the whole text."""
    cuts = data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=len(text)))
    result = stream(split_at(text, cuts), first_fragment_min_weight=3)
    assert "".join(c.text for c in result) == clean_for_speech(text)
    assert sum(c.flush for c in result) <= 1


def test_the_stream_cannot_be_fed_after_its_end() -> None:
    speakable = SpeakableStream()
    speakable.end()
    with pytest.raises(RuntimeError):
        speakable.feed("more")
    with pytest.raises(RuntimeError):
        speakable.end()


# --- the fast first fragment ---------------------------------------------------------------------


def test_english_flushes_at_the_first_heavy_enough_clause_break() -> None:
    deltas = ["Sure", ",", " here", " is", " the", " plan", ":", " first", ",", " we", " go", "."]
    assert texts(deltas) == [
        ("Sure", False),
        (",", False),  # "Sure," weighs 5
        (" here", False),
        (" is", False),
        (" the", False),
        (" plan", False),
        (":", False),  # an ASCII mark waits for what follows it
        ("", True),  # " first" confirms the break: "Sure, here is the plan:" is out
        (" first,", False),
        (" we", False),
        (" go", False),
        (".", False),
        ("", False),
    ]


def test_chinese_flushes_at_once_at_a_cjk_mark() -> None:
    deltas = ["好的", "，", "我来", "帮你", "查一下", "，", "请", "稍等", "。"]
    assert texts(deltas) == [
        ("好的", False),
        ("，", False),  # "好的，" weighs 6
        ("我来", False),
        ("帮你", False),
        ("查一下", False),
        ("，", True),
        ("请", False),
        ("稍等", False),
        ("。", False),
        ("", False),
    ]


@pytest.mark.parametrize(
    ("deltas", "at_flush"),
    [
        # exactly the minimum weight
        (["Hi, I am Bob", ",", " and"], "Hi, I am Bob,"),
        (["你好世界", "，", "我很好"], "你好世界，"),
        # one short of it: the next break
        (["Hi, I am Al", ",", " and", " you", "?", " Yes"], "Hi, I am Al, and you?"),
        (["你好吗", "，", "我很好", "。"], "你好吗，我很好。"),
        (["Yes", ".", " No", ".", " OK", ".", " Fine"], "Yes. No. OK."),
        # what split_sentences does not end a sentence at is no break
        (["Yesterday I met Dr", ".", " Smith", ",", " who"], "Yesterday I met Dr. Smith,"),
        (["The value is 3", ".", "14", ",", " roughly"], "The value is 3.14,"),
        (["It costs 3", ",", "000 dollars", ",", " so"], "It costs 3,000 dollars,"),
        (["See version 1", ":", "2 of it", ":", " now"], "See version 1:2 of it:"),
        (["共计3", "，", "000元", "，", "好"], "共计3，000元，"),
        # other marks: em dash at once, closers stay with the mark, '…' waits
        (["Well, actually", "—", "no"], "Well, actually—"),
        (['He said "stop', '."', " Then"], 'He said "stop."'),
        (["我想了想……", "好吧"], "我想了想……"),
        (["我说：「好的。", "」然后"], "我说：「好的。"),
        # markdown does not count
        (["**Really**", ",", " yes"], None),
        (["**Really right**", ",", " yes"], "Really right,"),
        # no break at all, or one that never gets confirmed
        (["Just some words without any punctuation at all"], None),
        (["This is a whole sentence."], None),
    ],
)
def test_first_fragment_cases(deltas: list[str], at_flush: str | None) -> None:
    assert spoken_at_flush(deltas) == at_flush


def test_a_break_inside_a_delta_cuts_the_delta() -> None:
    assert texts(["Hello there, my friend. How are you"]) == [
        ("Hello there,", True),
        (" my friend. How are you", False),
    ]
    assert texts(["我来帮你看看，这个问题很简单。"]) == [
        ("我来帮你看看，", True),
        ("这个问题很简单。", False),
    ]
    # the rest comes with the next cut, not later
    assert texts(["Alright then, fine", " and more"]) == [
        ("Alright then,", True),
        (" fine and more", False),
        ("", False),
    ]


def test_the_minimum_weight_is_configurable() -> None:
    assert spoken_at_flush(["Hi", ",", " you"], first_fragment_min_weight=0) == "Hi,"
    assert spoken_at_flush(["好", "，", "我", "。"], first_fragment_min_weight=4) == "好，"
    long = ["Well, this is it, and that is that, done. Next"]
    assert spoken_at_flush(long, first_fragment_min_weight=25) == (
        "Well, this is it, and that is that,"
    )
    with pytest.raises(ValueError, match="first_fragment_min_weight"):
        SpeakableStream(first_fragment_min_weight=-1)


@pytest.mark.parametrize("reply", REPLIES)
def test_never_more_than_one_flush_and_never_before_the_minimum(reply: str) -> None:
    for deltas in (list(reply), reply.split(" "), [reply]):
        spoken = ""
        flushes = 0
        for cut in stream(deltas):
            spoken += cut.text
            if cut.flush:
                flushes += 1
                assert weight(spoken) >= 10
                assert spoken[-1] in ",，、:：—.!?;…。！？；"
        assert flushes <= 1


def test_a_2000_character_reply_in_one_character_deltas_is_fast() -> None:
    reply = ((EN_OVERVIEW + "\n\n" + ZH_QUICKSORT + "\n\n") * 3)[:2000]
    started = time.perf_counter()
    stream(list(reply))
    assert time.perf_counter() - started < 1.0  # ~5 ms here; generous for loaded CI machines
