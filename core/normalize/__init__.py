"""Text normalization: numbers and symbols become the words a reader would say.

:func:`normalize_text` rewrites, in one left-to-right pass of one compiled pattern
(:mod:`~voicelane.core.normalize.patterns`), every number and symbol it knows, in Chinese or
English: the language of a token is that of the nearest letter on either side within the
sentence (a Han character: Chinese; else English; Latin letters glued to the token, as in
``CA1234``, are skipped), and a Han character right after it decides (``5月``, ``35.5元``,
``3D打印``), unless ``lang`` forces one. Every rewrite is mapped back to its source
(:class:`~voicelane.core.text_map.Mapped`), so ``$3.5M`` is one span spoken as five words.

Categories (first match wins, in this order), en / zh (:mod:`~voicelane.core.normalize.readers`):

* e-mail addresses and URLs, part by part, the scheme not read: ``john.doe@example.com`` →
  ``john dot doe at example dot com`` / ``john点doe艾特example点com``; ``www`` and two-letter
  domains spelled (``i o``), digits one by one;
* dates with month names (``May 6, 2024``, ``6 May 2024``, ``Jan. 1``, ``May 2024``): always
  English, ``May sixth, twenty twenty-four`` / ``the sixth of May twenty twenty-four``;
* Roman numerals after a title word only: ``Chapter IX`` → ``nine``, ``World War II`` →
  ``two``, ``Henry VIII`` / ``Pope John Paul II`` → ``the eighth`` / ``the second``; a lone
  ``I``, ``C``, ``MIX`` or ``CV`` stays a word;
* abbreviations: ``Dr. Smith`` → ``Doctor``, ``Main St.`` → ``Street`` / ``St. Louis`` →
  ``Saint``, ``vs.``, ``etc.``, ``e.g.``, ``i.e.``, ``approx.``, ``No. 5`` → ``number five``
  (always English: the number after ``No.`` reads in English too);
* numeric dates ``2024-05-06``, ``2024/05/06``, ``2024.05.06``, ``5/6/2024`` (US order; day
  first after 12 or with dots): ``May sixth, twenty twenty-four`` / ``二零二四年五月六日``;
* Chinese years ``2024年`` → ``二零二四年``, ``90后`` → ``九零后``;
* year ranges ``2020-2022`` → ``twenty twenty to twenty twenty-two`` / ``二零二零到二零二二``;
* decades ``1990s``, ``'80s`` → ``nineteen nineties``, ``eighties``;
* times ``14:30``, ``9:05``, ``10:30:15``: ``fourteen thirty``, ``nine oh five`` / ``十四点三十分``;
* phone numbers (``+1 (555) 010-9999``, ``212-555-0147``, ``010-62345678``, ``020 7123 4567``,
  11-digit mobiles, and any number of three digits or more after *dial*, *call*, 拨打, 电话):
  digit by digit;
* money ``$3.5M``, ``€20``, ``£5``, ``¥100``: ``three point five million dollars``;
  ``$1,299.99`` → ``... dollars and ninety-nine cents``, ``£12.50`` → ``twelve pounds fifty``;
  ``¥`` is a yuan when a China word (*Shanghai*, *RMB*...) is nearer than a Japan word
  within 80 characters, else a yen;
* percentages ``15%``, ``5‰``: ``fifteen percent`` / ``百分之十五``, ``千分之五``;
* mixed numbers ``1 1/2``, ``2½``: ``one and a half`` / ``一又二分之一``;
* ordinals ``21st``: ``twenty-first`` (always English);
* versions ``1.2.3`` (three parts or more; four parts up to 255 without a cue are an IP
  address, read with *dot*); a decimal after *v*, *version*, *Python*, *iOS* ... is a version:
  ``Python 3.11`` → ``three point eleven``;
* fractions ``3/4``: ``three quarters`` / ``四分之三`` (``9/11`` → ``nine eleven``; a
  reducible one that could be a date, ``5/20``, → ``five twenty`` / ``五月二十日``);
* units and temperatures after a number (``5 km``, ``200 km/h``, ``3.2 GB``, ``-3°C``,
  ``8℃``, ``20㎡``): ``five kilometers`` / ``五公里``, ``minus three degrees Celsius`` /
  ``零下三摄氏度``; Chinese keeps data units as letters (``五百GB``);
* powers ``2^10`` → ``two to the power of ten`` / ``二的十次方``;
* numbers with thousands separators, decimals and signs: ``-1,234.5``:
  ``minus one thousand two hundred thirty-four point five`` / ``负一千二百三十四点五``;
  digit runs over 15 digits, numbers with a leading zero and codes (``UA857``, ``A20240506``)
  are read digit by digit; ``2个``, ``2万`` read ``两`` (``第2`` stays ``第二``);
* ranges ``3-5``, ``10~20``, ``40–60°C``, ``-10℃~40℃``, ``1kg-2kg``, ``$100-$200``,
  ``9:00-18:00``: ``to`` / ``到`` between the two readings; ``10-3=7`` is a subtraction
  (``minus`` / ``减``); ``x86-64`` keeps its hyphen; ``3:2`` → ``three to two`` / ``三比二``;
* ``3 x 4`` → ``three by four`` (``times`` before ``=``), comparisons ``> < ≤ ≥ ≠ ≈``,
  hashtags (``#VoiceLane`` → ``hashtag VoiceLane``; ``#话题#`` → ``话题话题``), ``#5`` →
  ``number five``, ``C#`` → ``C sharp``, ``A/B`` → ``A B``, ``he/she`` → ``he or she``,
  ``元/斤`` → ``元每斤``, ``5'6"`` → ``five feet six inches``;
* symbols: ``& + = @ # ° ~ × ÷ ½ * % ± § © ® ™ ℃`` ... → words.

Never raises on any ``str``; runs in linear time (every repeat in the pattern is bounded or
over characters the next element cannot take; see :mod:`~voicelane.core.normalize.patterns`).
"""

from __future__ import annotations

from voicelane.core.normalize.patterns import PATTERN
from voicelane.core.normalize.readers import Lang, is_han, read
from voicelane.core.text_map import MapBuilder, Mapped

__all__ = ["Lang", "normalize_text"]


def _latin_alnum(char: str) -> bool:
    return char.isalnum() and not is_han(char)


def normalize_text(text: str, *, lang: Lang = "auto") -> Mapped:
    """``text`` with its numbers and symbols as words, mapped back to ``text``."""
    builder = MapBuilder(text)
    position = 0
    tail = ""  # the last character written
    for match in PATTERN.finditer(text):
        if match.start() < position:
            continue
        for start, end, words in read(match, text, lang):
            if start < position:
                continue
            if start > position:
                builder.keep(position, start)
                tail = text[start - 1]
            # Words need spaces around them in Latin text: "5km" -> "five km".
            spoken = words
            if spoken.strip() and not is_han(spoken[0]) and _latin_alnum(tail):
                spoken = " " + spoken
            if (
                spoken.strip()
                and not is_han(spoken[-1])
                and end < len(text)
                and _latin_alnum(text[end])
            ):
                spoken += " "
            builder.replace(start, end, spoken)
            tail = spoken[-1] if spoken else tail
            position = end
    builder.keep(position, len(text))
    return builder.build()
