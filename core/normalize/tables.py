"""The words the normalizer reads things as: months, currencies, units, symbols, abbreviations,
the title words before Roman numerals, top-level domains. Data only; the rules that use it are
in :mod:`voicelane.core.normalize.readers`."""

from __future__ import annotations

from typing import NamedTuple

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

MONTH_BY_PREFIX = {name[:3]: index for index, name in enumerate(MONTHS, start=1)}
"""``"Jan"`` → 1 ... (``Sept`` is looked up by its first three letters too)."""

CURRENCY_EN = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "¥": ("yen", "yen", "", ""),
}
"""Symbol → singular, plural, and the hundredth's singular and plural (none for ¥)."""

YUAN_EN = ("yuan", "yuan", "", "")
"""``¥`` in a sentence about China: a yuan, not a yen."""

CURRENCY_ZH = {"$": "美元", "€": "欧元", "£": "英镑", "¥": "元"}

SCALE_EN = {"k": "thousand", "m": "million", "b": "billion"}
SCALE_ZH = {
    "k": "千", "m": "百万", "b": "十亿",
    "thousand": "千", "million": "百万", "billion": "十亿", "trillion": "万亿",
}  # fmt: skip

SYMBOL_EN = {
    "&": "and", "＆": "and", "+": "plus", "＋": "plus", "=": "equals", "＝": "equals",
    "@": "at", "＠": "at", "#": "pound", "＃": "pound", "°": "degrees", "~": "about",
    "～": "about", "×": "times", "÷": "divided by", "½": "one half", "¼": "one quarter",
    "¾": "three quarters", "⅓": "one third", "⅔": "two thirds", "⅛": "one eighth",
    "*": "star", "%": "percent", "％": "percent", "‰": "per mille", "±": "plus or minus",
    "≈": "approximately", "≠": "is not equal to", "≤": "less than or equal to",
    "≥": "greater than or equal to", "<": "less than", ">": "greater than",
    "<=": "less than or equal to", ">=": "greater than or equal to", "§": "section",
    "©": "copyright", "®": "registered", "™": "trademark", "№": "number",
    "℃": "degrees Celsius", "℉": "degrees Fahrenheit", "$": "dollars", "€": "euros",
    "£": "pounds", "¥": "yen", "¢": "cents", "^": "caret", "\\": "backslash", "|": "bar",
}  # fmt: skip
SYMBOL_ZH = {
    "&": "和", "＆": "和", "+": "加", "＋": "加", "=": "等于", "＝": "等于", "@": "艾特",
    "＠": "艾特", "#": "井号", "＃": "井号", "°": "度", "~": "约", "～": "约", "×": "乘",
    "÷": "除以", "½": "二分之一", "¼": "四分之一", "¾": "四分之三", "⅓": "三分之一",
    "⅔": "三分之二", "⅛": "八分之一", "*": "星号", "%": "百分号", "％": "百分号",
    "‰": "千分号", "±": "正负", "≈": "约等于", "≠": "不等于", "≤": "小于等于",
    "≥": "大于等于", "<": "小于", ">": "大于", "<=": "小于等于", ">=": "大于等于",
    "§": "第", "©": "版权", "®": "注册商标", "™": "商标", "№": "号", "℃": "摄氏度",
    "℉": "华氏度", "$": "美元", "€": "欧元", "£": "英镑", "¥": "元", "¢": "美分", "^": "乘方",
    "\\": "反斜杠", "|": "竖线",
}  # fmt: skip

FRACTION_EN = {2: ("half", "halves"), 4: ("quarter", "quarters")}
UNICODE_FRACTIONS = {"½": (1, 2), "¼": (1, 4), "¾": (3, 4), "⅓": (1, 3), "⅔": (2, 3), "⅛": (1, 8)}


class Unit(NamedTuple):
    """How a unit after a number is read: English singular and plural, Chinese, and whether a
    Chinese 2 before it is ``两`` (``两公斤``) rather than ``二``."""

    one: str
    many: str
    zh: str
    liang: bool = True


def _u(one: str, many: str | None, zh: str, liang: bool = True) -> Unit:
    return Unit(one, many if many is not None else one + "s", zh, liang)


UNITS: dict[str, Unit] = {
    # length
    "km": _u("kilometer", None, "公里"),
    "m": _u("meter", None, "米"),
    "cm": _u("centimeter", None, "厘米"),
    "mm": _u("millimeter", None, "毫米"),
    "μm": _u("micrometer", None, "微米"),
    "µm": _u("micrometer", None, "微米"),
    "nm": _u("nanometer", None, "纳米"),
    "mi": _u("mile", None, "英里"),
    "ft": _u("foot", "feet", "英尺"),
    "yd": _u("yard", None, "码"),
    "㎞": _u("kilometer", None, "公里"),
    "㎝": _u("centimeter", None, "厘米"),
    "㎜": _u("millimeter", None, "毫米"),
    # mass
    "kg": _u("kilogram", None, "千克"),
    "g": _u("gram", None, "克"),
    "mg": _u("milligram", None, "毫克"),
    "μg": _u("microgram", None, "微克"),
    "µg": _u("microgram", None, "微克"),
    "lb": _u("pound", None, "磅"),
    "lbs": _u("pound", None, "磅"),
    "oz": _u("ounce", None, "盎司"),
    "㎏": _u("kilogram", None, "千克"),
    # volume
    "L": _u("liter", None, "升"),
    "l": _u("liter", None, "升"),
    "ml": _u("milliliter", None, "毫升"),
    "mL": _u("milliliter", None, "毫升"),
    "㎖": _u("milliliter", None, "毫升"),
    "gal": _u("gallon", None, "加仑"),
    "tbsp": _u("tablespoon", None, "汤匙"),
    "tsp": _u("teaspoon", None, "茶匙"),
    # area
    "㎡": _u("square meter", None, "平方米"),
    "m²": _u("square meter", None, "平方米"),
    "km²": _u("square kilometer", None, "平方公里"),
    "cm²": _u("square centimeter", None, "平方厘米"),
    "sq ft": _u("square foot", "square feet", "平方英尺"),
    "ha": _u("hectare", None, "公顷"),
    # speed
    "km/h": _u("kilometer per hour", "kilometers per hour", "公里每小时"),
    "kph": _u("kilometer per hour", "kilometers per hour", "公里每小时"),
    "mph": _u("mile per hour", "miles per hour", "英里每小时"),
    "m/s": _u("meter per second", "meters per second", "米每秒"),
    # data (Chinese keeps the letters: 五百GB)
    "KB": _u("kilobyte", None, "KB", False),
    "kB": _u("kilobyte", None, "KB", False),
    "MB": _u("megabyte", None, "MB", False),
    "GB": _u("gigabyte", None, "GB", False),
    "TB": _u("terabyte", None, "TB", False),
    "PB": _u("petabyte", None, "PB", False),
    "KB/s": _u("kilobyte per second", "kilobytes per second", "KB每秒", False),
    "MB/s": _u("megabyte per second", "megabytes per second", "MB每秒", False),
    "GB/s": _u("gigabyte per second", "gigabytes per second", "GB每秒", False),
    "kbps": _u("kilobit per second", "kilobits per second", "kbps", False),
    "Kbps": _u("kilobit per second", "kilobits per second", "Kbps", False),
    "Mbps": _u("megabit per second", "megabits per second", "Mbps", False),
    "Gbps": _u("gigabit per second", "gigabits per second", "Gbps", False),
    # frequency, power, electricity
    "Hz": _u("hertz", "hertz", "赫兹", False),
    "kHz": _u("kilohertz", "kilohertz", "千赫兹", False),
    "MHz": _u("megahertz", "megahertz", "兆赫兹", False),
    "GHz": _u("gigahertz", "gigahertz", "吉赫兹", False),
    "W": _u("watt", None, "瓦"),
    "kW": _u("kilowatt", None, "千瓦"),
    "MW": _u("megawatt", None, "兆瓦"),
    "kWh": _u("kilowatt hour", None, "千瓦时"),
    "Wh": _u("watt hour", None, "瓦时"),
    "V": _u("volt", None, "伏"),
    "mA": _u("milliamp", None, "毫安"),
    "mAh": _u("milliamp hour", None, "毫安时"),
    "hp": _u("horsepower", "horsepower", "马力"),
    "kcal": _u("kilocalorie", None, "千卡"),
    "kPa": _u("kilopascal", None, "千帕"),
    "psi": _u("P S I", "P S I", "磅每平方英寸", False),
    "dB": _u("decibel", None, "分贝", False),
    "rpm": _u("R P M", "R P M", "转每分钟", False),
    "fps": _u("frame per second", "frames per second", "帧每秒", False),
    "px": _u("pixel", None, "像素", False),
    # time
    "ms": _u("millisecond", None, "毫秒"),
    "μs": _u("microsecond", None, "微秒"),
    "µs": _u("microsecond", None, "微秒"),
    "ns": _u("nanosecond", None, "纳秒"),
    "s": _u("second", None, "秒"),
    "sec": _u("second", None, "秒"),
    "secs": _u("second", None, "秒"),
    "min": _u("minute", None, "分钟"),
    "mins": _u("minute", None, "分钟"),
    "h": _u("hour", None, "小时"),
    "hr": _u("hour", None, "小时"),
    "hrs": _u("hour", None, "小时"),
    # temperature (Chinese: 零下 for a minus)
    "°C": _u("degree Celsius", "degrees Celsius", "摄氏度", False),
    "° C": _u("degree Celsius", "degrees Celsius", "摄氏度", False),
    "℃": _u("degree Celsius", "degrees Celsius", "摄氏度", False),
    "°F": _u("degree Fahrenheit", "degrees Fahrenheit", "华氏度", False),
    "° F": _u("degree Fahrenheit", "degrees Fahrenheit", "华氏度", False),
    "℉": _u("degree Fahrenheit", "degrees Fahrenheit", "华氏度", False),
    "°": _u("degree", None, "度", False),
    # currency after an amount
    "¢": _u("cent", None, "美分", False),
    "USD": _u("US dollar", None, "美元"),
    "EUR": _u("euro", None, "欧元"),
    "GBP": _u("British pound", None, "英镑"),
    "JPY": _u("yen", "yen", "日元"),
    "CNY": _u("yuan", "yuan", "元"),
    "RMB": _u("yuan", "yuan", "元"),
    "HKD": _u("Hong Kong dollar", None, "港元"),
}
"""Unit symbol (case-sensitive) → reading. Ambiguous letters (``in``, ``t``, ``A``, ``B``,
``K``, ``G``, ``M``) are left out: ``5G``, ``4K``, ``7B`` and ``A4`` stay letters."""

TEMPERATURE_UNITS = frozenset({"°C", "° C", "℃", "°F", "° F", "℉", "°"})

ZH_LIANG_AFTER = (
    "个只位本条张件次天年斤两米元块片名台部辆家种把双杯瓶碗份篇首场周岁倍点万千百亿克升吨套间层"
)
"""Measure words (and ``万千百亿``) after which a Chinese 2 is ``两``: ``两个``, ``两万``."""
ZH_LIANG_WORDS = ("小时", "分钟", "公里", "公斤", "千克", "千米", "毫升", "个月", "星期")
ZH_NO_LIANG_WORDS = ("年级", "年代")

ABBREVIATIONS_BEFORE_NAME = {
    "Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Mx": "Mix",
    "Prof": "Professor", "Gov": "Governor", "Gen": "General", "Capt": "Captain",
    "Lt": "Lieutenant", "Col": "Colonel", "Sgt": "Sergeant", "Rev": "Reverend",
    "Hon": "Honorable", "Sen": "Senator", "Rep": "Representative", "Pres": "President",
    "Fr": "Father", "Mt": "Mount", "St": "Saint", "Cmdr": "Commander", "Adm": "Admiral",
}  # fmt: skip
"""Titles read as words before a capitalized name (``Dr. Smith`` → ``Doctor Smith``)."""

ABBREVIATIONS_AFTER_NAME = {
    "St": "Street", "Ave": "Avenue", "Rd": "Road", "Blvd": "Boulevard", "Dr": "Drive",
    "Ln": "Lane", "Jr": "Junior", "Sr": "Senior",
}  # fmt: skip
"""Read as words after a capitalized word (``Main St.`` → ``Main Street``)."""

ABBREVIATIONS_ANYWHERE = {
    "vs": "versus", "etc": "et cetera", "approx": "approximately", "Approx": "Approximately",
    "e.g": "for example", "i.e": "that is", "cf": "compare", "a.k.a": "also known as",
    "incl": "including", "dept": "department", "Dept": "Department",
}  # fmt: skip
"""Read as words wherever they stand (with their period)."""

ABBREVIATIONS_BEFORE_NUMBER = {
    "No": "number", "Nos": "numbers", "Vol": "volume", "vol": "volume", "Ch": "chapter",
    "ch": "chapter", "Fig": "figure", "fig": "figure", "p": "page", "pp": "pages",
    "Sec": "section", "Art": "article", "Eq": "equation",
}  # fmt: skip
"""Read as words only before a number (``No. 5`` → ``number five``), always in English."""

ROMAN_CARDINAL_TITLES = (
    "Chapter", "Part", "Act", "Book", "Volume", "Vol.", "War", "Phase", "Stage", "Scene",
    "Canto", "Type", "Class", "Grade", "Level", "Round", "Season", "Episode", "Article",
    "Title", "Division", "Tier", "Category", "Psalm", "Olympiad", "Vatican",
)  # fmt: skip
"""Before any Roman numeral (``World War I``, ``Chapter IX``): read as a number."""

ROMAN_CARDINAL_TITLES_MULTI = (
    "Appendix", "Annex", "Section", "Schedule", "Rocky", "Fantasy", "Bowl", "Wrestlemania",
    "Civilization", "Apollo",
)  # fmt: skip
"""Before a Roman numeral of two letters or more only (``Appendix C`` is a letter)."""

ROMAN_REGNAL_NAMES = (
    "Henry", "Louis", "Elizabeth", "George", "Edward", "William", "Charles", "James",
    "Richard", "Victoria", "Mary", "Anne", "John", "Paul", "Pius", "Benedict", "Gregory", "Leo",
    "Innocent", "Clement", "Urban", "Alexander", "Napoleon", "Peter", "Catherine",
    "Frederick", "Philip", "Ferdinand", "Ludwig", "Nicholas", "Ivan", "Constantine",
    "Ramesses", "Ramses", "Rameses", "Amenhotep", "Thutmose", "Wilhelm", "Gustav", "Carl",
    "Olaf", "Harald", "Haakon", "Felipe", "Juan Carlos", "Francis", "Sixtus", "Boniface",
    "Otto", "Rudolf", "Leopold", "Stephen", "David", "Robert", "Alfonso", "Pedro",
    "Manuel", "Christian", "Frederik", "Rama", "Selim", "Mehmed", "Suleiman", "Murad",
)  # fmt: skip
"""Before a Roman numeral other than ``I`` (``Henry VIII`` → ``Henry the eighth``); ``I``
only with a title in front (``Queen Elizabeth I``): ``Henry I said`` is a pronoun."""

ROMAN_REGNAL_TITLES = (
    "King", "Queen", "Pope", "Emperor", "Empress", "Tsar", "Czar", "Tsarina", "Kaiser",
    "Pharaoh", "Prince", "Princess", "Duke", "Sultan", "Shah",
)  # fmt: skip
"""A title, one or two capitalized names, a Roman numeral: regnal (``Pope John Paul II``)."""

TLDS = (
    "com", "org", "net", "edu", "gov", "mil", "int", "io", "ai", "dev", "app", "co", "uk",
    "cn", "de", "jp", "fr", "info", "biz", "me", "tv", "us", "ca", "au", "ru", "nl", "eu",
    "ch", "kr", "hk", "tw", "sg", "it", "es", "br", "in", "xyz", "tech", "online", "site",
    "cloud", "top", "ly", "gg", "so", "to", "fm", "cc", "ws",
)  # fmt: skip
"""Top-level domains a bare domain (``example.org``, no ``www`` or scheme) must end with."""

SPELLED_TLDS_KEPT = frozenset({"co"})
"""Two-letter domain labels read as a word; the others are spelled (``io`` → ``i o``)."""

WEB_PUNCT_EN = {
    ".": "dot", "/": "slash", "@": "at", "-": "dash", "_": "underscore", ":": "colon",
    "?": "question mark", "=": "equals", "&": "and", "#": "hash", "%": "percent",
    "~": "tilde", "+": "plus", ",": "comma", "!": "bang", "*": "star", ";": "semicolon",
    "$": "dollar",
}  # fmt: skip
WEB_PUNCT_ZH = {
    ".": "点", "/": "斜杠", "@": "艾特", "-": "杠", "_": "下划线", ":": "冒号", "?": "问号",
    "=": "等于", "&": "和", "#": "井号", "%": "百分号", "~": "波浪号", "+": "加", ",": "逗号",
    "!": "感叹号", "*": "星号", ";": "分号", "$": "美元符号",
}  # fmt: skip

VERSION_CUES = (
    "v", "V", "version", "Version", "ver", "Ver", "Python", "Node", "Node.js", "iOS", "iPadOS",
    "Android", "macOS", "OS X", "Ubuntu", "Debian", "Fedora", "Java", "PHP", "Ruby", "Rust",
    "Perl", "Chrome", "Firefox", "Safari", "kernel", "Linux", "CUDA", "GCC", "gcc", "Django",
    "React", "Vue", "TypeScript", "npm", "pip", "Swift", "Kotlin", "Scala", "Qt", "OpenSSL",
    "Unity", "Blender", "Go", "Golang", "Rails", "Postgres", "PostgreSQL", "MySQL", "Redis",
    "Kubernetes", "Docker", "HTTP", "Bluetooth", "USB", "Wi-Fi", "GPT", "Llama", "Qwen",
    "release", "Release", "版本", "版",
)  # fmt: skip
"""A decimal right after one of these is a version: ``Python 3.11`` → ``three point eleven``."""

YUAN_CUES = (
    "China", "Chinese", "Beijing", "Shanghai", "Shenzhen", "Guangzhou", "yuan", "RMB", "CNY",
    "renminbi", "Hangzhou", "Chengdu", "Taobao", "Alipay", "WeChat",
)  # fmt: skip
"""Words near a ``¥`` in English that make it a yuan (the nearer of these and
:data:`YEN_CUES` decides; a yen without either)."""

YEN_CUES = ("Japan", "Japanese", "Tokyo", "Osaka", "Kyoto", "yen", "JPY")
