"""What kind of figure a question asks for, and what kind a reply's figure is.

A small model often answers with the right passage's wrong figure: asked how soon a lost badge
must be reported, it gives the replacement fee ("50 元"), from a sentence about the badge, so
the support check finds it held by a sentence about the question. What tells it apart is its
kind: the question asks for a time and the reply gives an amount. `mismatched` names such
figures when nothing in the reply is of the kind asked for.

Three kinds only, where wording says them plainly in English and Chinese: a time (a duration,
a date, a clock time, a weekday), an amount of money, a percentage. Anything else (counts,
phone extensions, addresses) has no kind and is never called a mismatch — except a count a
Chinese question asks with a measure word, which a figure carries too: asked "PIN 码要设几位",
a reply "18层" gives floors, not digits (`asked_measure`, `mismatched_measure`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

TIME = "time"
MONEY = "money"
PERCENT = "percent"

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_MONTHS_FULL = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"

# What a question asks for. A time first: "how much paid time off" asks for days, not money.
_ASKS_TIME = re.compile(
    # "how often" is left out: "never", "only when it was exposed" answer it
    r"\bhow (?:long|soon|quickly|early|late|far in advance)\b|"
    r"\bhow many (?:hours|days|weeks|months|years|minutes|working days|calendar days)\b|"
    # "how much holiday pay" asks for money
    r"\bhow much (?:paid )?(?:time|overtime|leave|holiday|vacation|notice)\b"
    r"(?!\s*(?:pay|allowance|money|bonus|compensation|payment))|"
    # "when do I need approval?" often asks for a condition, not a time: not read as one
    r"\bby when\b|\bwhat time\b|\bwhich (?:day|weekday|date|month)\b|\buntil when\b|"
    r"多久|多长时间|几天|多少天|几个?小时|多少小时|几周|几个月|几年|几点|什么时候|何时|哪一?天|"
    r"多少个?工作日|几个工作日|截止到?什么|最晚什么",
    re.I,
)
_ASKS_PERCENT = re.compile(
    r"\bwhat (?:percentage|share|proportion|percent)\b|\bhow many percent\b|"
    r"百分之几|百分比是?多少|比例是?多少|几成|打几折",
    re.I,
)
_ASKS_MONEY = re.compile(
    r"\bhow much\b[^.?!。？！]{0,80}?\b(?:cost|costs|price|fee|fees|charge|charged|pay|paid|"
    r"reimburse\w*|allowance|subsidy|budget|spend|worth|salary|eur|euros?|yuan|rmb)\b|"
    r"\b(?:what|how much) (?:is|are) the (?:price|cost|fee|fees|charge)\b|"
    # a threshold: "above what registration fee…", "over what cost per course…"
    r"\b(?:above|over|below|under|beyond|exceeding|up to) (?:what|which) (?:\w+ ){0,2}"
    r"(?:fee|fees|cost|costs|price|amount|sum|value|spend|budget)\b|"
    r"多少钱|多少元|几元|多少块|什么价|价格是?多少|价钱|费用是?多少|费是?多少|交多少|"
    r"补贴多少(?!次)|报销多少(?!次)|预算是?多少|多少预算",
    re.I,
)

# A figure's kind, from the words around it in the reply.
_TIME_AFTER = re.compile(
    r"(?:st|nd|rd|th)?\s*\**\s*(?:hours?|hrs?\b|h(?![a-z])|minutes?|mins?\b|days?\b|wks?\b|"
    r"working days?|"
    r"business days?|calendar days?|weeks?|months?|years?|a\.?m\.?|p\.?m\.?|o'clock|"
    rf"(?:{_MONTHS})\b|"
    r"个?小时|分钟|天|日|个?星期|周|个月|月|年|个?工作日|点|号)",
    re.I,
)
_TIME_BEFORE = re.compile(
    rf"\b(?:{_MONTHS_FULL}|{_WEEKDAYS}|week|month|day|year),?\s*\**\s*$", re.I
)
_UNITS_EN = (
    r"(?:working |business |calendar |full )?(?:hours?|minutes?|days?|weeks?|months?|years?)"
)
_UNITS_ZH = r"(?:个)?(?:小时|分钟|天|日|周|星期|礼拜|个?月|年|工作日)"
# Words that give a time without a digit: a weekday, a month, "at once", "the end of the
# month", a number written out ("six months", "三个月", "半天").
_TIME_WORDS = re.compile(
    rf"\b(?:{_MONTHS}|{_WEEKDAYS}|immediately|at once|right away|midnight|noon)\b|"
    r"\b(?:christmas|easter|new year'?s?|whitsun|pentecost)\b|春节|国庆|元旦|中秋|清明|端午|"
    r"\b(?:end|start|beginning) of (?:the |each |every )?(?:\w+ )?"
    r"(?:day|week|month|quarter|year)\b|"
    r"\b(?:next|same|following|every|each|per) (?:\w+ )?"
    r"(?:day|week|month|quarter|year|working day|business day|morning|evening)\b|"
    r"\b(?:daily|weekly|monthly|quarterly|yearly|annually|biweekly|fortnightly|fortnight|"
    r"tomorrow|today|tonight|asap|eod|whenever)\b|"
    rf"\b(?:{_WEEKDAYS})s\b|"
    r"\b(?:mon|tue|wed|thu|fri|sat|sun)\s*[-–]\s*(?:mon|tue|wed|thu|fri|sat|sun)\b|"
    r"\b(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    rf"thirty|forty|fifty|sixty|ninety|hundred|half an?|several|a few) {_UNITS_EN}\b|"
    r"(?:星期|周|礼拜)[一二三四五六日天]|每(?:天|日|周|星期|月|年|季度?)|按(?:天|日|周|月|年|季度?)|"
    r"[次下上本]个?(?:月|周|年|季度)|周末|(?:上午|下午|早上|晚上|中午|凌晨)[一二两三四五六七八九十]+点|"
    r"[一二三四五六七八九十]+月|立即|立刻|马上|当天|次日|月底|年底|"
    rf"月末|年末|月初|年初|中午|午夜|[一二两三四五六七八九十百半]+{_UNITS_ZH}",
    re.I,
)
# An amount written out in Chinese numerals (五十元), or a share of one: free, in full, half.
_MONEY_WORDS = re.compile(
    r"[一二两三四五六七八九十百千万]+\s*(?:元|块)|\b(?:free|no charge|at no cost|in full|half)\b|"
    r"免费|全额|一半|百分之[一二三四五六七八九十百]+|[一二三四五六七八九]成",
    re.I,
)
# A clock time, alone or in a range (09:00-18:00), or a date (2025-03-31, 31.03.2025, 3/31).
CLOCK_OR_DATE = re.compile(
    r"\d{1,2}:\d{2}|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}\.\d{1,2}\.\d{2,4}|\d{1,2}/\d{1,2}(?:/\d{2,4})?"
)
_MONEY_AFTER = re.compile(
    r"k?\s*\**\s*(?:eur\b|euros?\b|€|元|块|万元|千元|yuan\b|rmb\b|cny\b|usd\b|gbp\b|chf\b|"
    r"dollars?\b|pounds?\b|\$|£)",
    re.I,
)
_MONEY_BEFORE = re.compile(
    r"(?:\beur|€|¥|￥|\brmb|\bcny|\busd|\bgbp|\bchf|\$|£|人民币)\s*\**\s*$", re.I
)
_PERCENT_AFTER = re.compile(r"\s*(?:%|％|percent\b|per cent\b)", re.I)
# A figure written with digits: "28", "1,200", "9:30", "31.03.2025", "9-17" (also evidence's).
NUMBER = re.compile(r"\d+(?:[.,:/\-]\d+)*")


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def asked_kind(question: str) -> str | None:
    """The kind of figure `question` asks for, or None when its wording does not say."""
    text = _normal(question)
    for kind, pattern in ((TIME, _ASKS_TIME), (PERCENT, _ASKS_PERCENT), (MONEY, _ASKS_MONEY)):
        if pattern.search(text):
            return kind
    return None


def figure_kinds(text: str) -> dict[str, set[str]]:
    """Each figure of `text` as written (NFKC) -> the kinds the words around it give it."""
    text = _normal(text)
    out: dict[str, set[str]] = {}
    for match in NUMBER.finditer(text):
        before, after = text[max(0, match.start() - 12) : match.start()], text[match.end() :]
        kinds: set[str] = set()
        if _MONEY_BEFORE.search(before) or _MONEY_AFTER.match(after):
            kinds.add(MONEY)
        elif _PERCENT_AFTER.match(after):
            kinds.add(PERCENT)
        elif (
            CLOCK_OR_DATE.search(match.group(0))
            or _TIME_AFTER.match(after)
            or _TIME_BEFORE.search(before)
        ):
            kinds.add(TIME)
        out.setdefault(match.group(0), set()).update(kinds)
    return out


def answers(asked: str, kinds: Iterable[str]) -> bool:
    """Whether a figure of `kinds` can answer a question asking for `asked` (an amount may be
    given as a share: "the company pays 70%")."""
    fitting = {asked, PERCENT} if asked == MONEY else {asked}
    return bool(fitting & set(kinds))


# A reply that answers by a negation or a condition ("you need not", "only if it was exposed",
# "无需") may give no figure and still answer: it is not said to give none.
_NEGATION_OR_CONDITION = re.compile(
    r"\b(?:never|not|no|none|don't|doesn't|needn't|only when|only if|whenever|unless)\b|"
    r"\b(?:as needed|as required|depending on|depends on)\b|"
    r"不|无需|无须|没有|只有|仅在|如果|除非|按需|按\w{0,4}需要|视(?:情况|需要)",
    re.I,
)


def answers_otherwise(reply: str) -> bool:
    """Whether `reply` answers by a negation or a condition (`_NEGATION_OR_CONDITION`)."""
    return bool(_NEGATION_OR_CONDITION.search(_normal(reply)))


def gives(asked: str, reply: str, question: str = "") -> bool:
    """Whether `reply` says something of the kind `asked` for: a figure of that kind, or words
    that give one without a digit (`_TIME_WORDS`, `_MONEY_WORDS`); what it repeats from
    `question` ("four full years" in "I've been here four full years. How much holiday…?")
    gives nothing."""
    text, asked_text = _normal(reply), _normal(question)
    repeated = set(figure_kinds(asked_text))
    kinds = [k for figure, k in figure_kinds(text).items() if figure not in repeated]
    if any(answers(asked, k) for k in kinds):
        return True
    pattern = _TIME_WORDS if asked == TIME else _MONEY_WORDS
    if pattern is None:
        return False
    said = {m.group(0).lower() for m in pattern.finditer(asked_text)}
    return any(m.group(0).lower() not in said for m in pattern.finditer(text))


def mismatched(
    question: str, reply: str, written: Iterable[str], *, asked: str | None = None
) -> dict[str, str]:
    """Of the reply's figures `written` (as the reply writes them), those of another kind than
    the question asks for -> their kind; empty when the question's kind is unknown, when the
    reply gives something of that kind (it answers, and may say more) or when one of `written`
    has no kind (it may be the answer, written in a way not read here: "9-17", "Q1"). `asked`:
    the question's kind when the caller has it already."""
    asked = asked or asked_kind(question)
    if asked is None or gives(asked, reply, question):
        return {}
    kinds = figure_kinds(reply)
    out: dict[str, str] = {}
    for figure in written:
        known = kinds.get(_normal(figure), set())
        if not known:
            return {}
        out[figure] = sorted(known)[0]
    return out


# A count asked with a Chinese measure word: 几位 (digits, people), 几层, 几次, 多少张. "个", every
# noun's measure word, says nothing; a time or an amount is a kind (above).
_MEASURES = "位人名层楼次回张台件条份项本家所辆间岁级"
_ASKS_MEASURE = re.compile(rf"(?:几|多少)\s*(?:个\s*)?([{_MEASURES}])")
# Measure words that count the same things: people (几位同事, 3 人), floors, times.
_ALIKE = (frozenset("位人名"), frozenset("层楼"), frozenset("次回"))
# The measure word or unit right after a figure ("18 层", "3个人", "50 元", "2 小时", "1810 室").
_MEASURE_AFTER = re.compile(
    rf"\s*\**\s*(?:个\s*)?(小时|分钟|公里|[{_MEASURES}元块天日周月年号室%％])"
)


# The words that end what "how many" counts: a verb, a pronoun, a preposition.
_AFTER_COUNTED = (
    "do|does|did|can|could|are|is|was|were|will|would|should|may|might|must|have|has|had|"
    "i|we|you|they|he|she|it|there|per|a|an|of|in|on|for|at|to|am|be|left|each|every"
)
_HOW_MANY = re.compile(
    r"\bhow many\s+((?:[a-z][a-z'-]*\s+)*?)([a-z][a-z'-]*)"
    rf"(?=\s+(?:{_AFTER_COUNTED})\b|\s*[?,.]|$)",
    re.I,
)


def counted_noun(question: str) -> str | None:
    """What an English question counts ("sessions" of "How many free counselling sessions do I
    get?"): the unit of its answer, as "位" is of 几位; its other words say what is counted."""
    match = _HOW_MANY.search(question)
    return match.group(2).lower() if match else None


def asked_measure(question: str) -> str | None:
    """The measure word a Chinese question counts in ("位" of "PIN 码要设几位"), or None."""
    match = _ASKS_MEASURE.search(_normal(question))
    return match.group(1) if match else None


def _alike(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in _ALIKE)


def mismatched_measure(reply: str, written: Iterable[str], measure: str) -> dict[str, str]:
    """Of the reply's figures `written`, those that count in another measure word than
    `measure` -> theirs; empty when one of them counts in `measure` (or a like one: 人 for 位)
    or has no measure word after it (it may be the answer: "6 位数字", "8 个字符")."""
    text = _normal(reply)
    measures: dict[str, set[str]] = {}
    for match in NUMBER.finditer(text):
        after = _MEASURE_AFTER.match(text, match.end())
        measures.setdefault(match.group(0), set()).update([after.group(1)] if after else [""])
    out: dict[str, str] = {}
    for figure in written:
        found = measures.get(_normal(figure), {""})
        if "" in found or any(_alike(m, measure) for m in found):
            return {}
        out[figure] = sorted(found)[0]
    return out
