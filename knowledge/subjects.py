"""What a question is about: its subject's terms (gym, funeral, Hamburg, "L2"), each weighted by
how much it says, and which of them a sentence or its heading holds. The support check
(`knowledge.evidence`) reads a sentence as about the question when it speaks of them. Pure
functions: the caller passes the weights in (`knowledge.support.subject_of`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from knowledge.segment import STOPWORDS, words
from knowledge.sentences import Sentence

# --- what was asked -------------------------------------------------------------------------

# Words of a question that say what kind of answer is wanted, not what it is about.
GENERIC = frozenset(
    """
    company companies employee employees staff people person someone anyone everyone allowed
    need needs get gets got pay paid give given take taken make use used work working
    day days week weeks month months year years time times hour hours minute minutes number
    amount much many long often maximum minimum most least max min per each every
    rule rules policy policies allowed allow may able new old first last next
    one two three four five
    eur euro euros usd yuan rmb cny dollar dollars
    hostname hostnames url urls weekday weekdays software app apps application applications
    what's who's where's when's how's i'm i've i'd i'll we're am
    don't doesn't didn't can't cannot won't isn't aren't wasn't haven't hasn't shouldn't
    wouldn't couldn't mustn't once unless whenever whether while although though because
    her hers him his us myself yourself himself herself ourselves themselves
    towards toward until during under within without between after before against via
    多少 几 几天 多久 多长 什么 时候 哪里 哪儿 怎么办 规定 员工 公司 可以 需要 允许
    时间 长时间 多长时间 几点 几位 多远 多大 多高 多重
    最多 最少 每 每天 每月 每年 欧元 美元 人民币 元
    """.split()  # noqa: SIM905 - a word list reads best as words
)


def stem(word: str) -> str:
    """Latin-script words compared without their plural or -ly/-ing endings (hotel, hotels;
    nightly, night): enough for a question's subject, which is most often a noun."""
    if not word.isascii():
        return word
    for ending in ("ing", "ly"):
        if word.endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    # A plural's "s", then a final "e": expense and expenses, tax and taxes, fee and fees all
    # come to one stem ("class" keeps its "ss").
    if len(word) >= 4 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if len(word) >= 4 and word.endswith("e"):
        word = word[:-1]
    return word


def subject_terms(question: str) -> list[str]:
    """The question's words that say what it is about, in order (stop words, question words,
    contractions, the measure after "how", currency names and the generic words of any policy
    question aside)."""
    seen: dict[str, None] = {}
    previous = ""
    codes = codes_in(question)
    for word in words(question):
        # "How large", "how soon", "how far": the measure asked for, not what it is about.
        after_how, previous = previous == "how", word
        if word in codes:
            seen.setdefault(word, None)
            continue
        if any(word in code for code in codes if not code.isalpha()):
            continue  # "l", "2" of "L2": the code is the term
        if word in STOPWORDS or word in GENERIC or (len(word) < 2 and not word.isdigit()):
            continue
        if after_how:
            continue
        if any(c.isdigit() for c in word):
            continue
        seen.setdefault(word, None)
    for code in sorted(codes):
        if not code.isalpha():  # "L2" is two words to `words`, one term here
            seen.setdefault(code, None)
    return list(seen)


def _held_code(code: str, text: str) -> bool:
    """Whether `text` names the code: "L2" as a word of its own, "D" in capitals."""
    if len(code) == 1:
        return re.search(rf"(?<![A-Za-z0-9]){code.upper()}(?![A-Za-z0-9])", text) is not None
    pattern = rf"(?<![A-Za-z0-9]){re.escape(code)}(?![A-Za-z0-9])"
    return re.search(pattern, text, re.IGNORECASE) is not None


# A class, level or model a question names by a capital letter and digits: "D 类城市", "L2",
# "A1", "T14" (lower-cased, as `words` gives them).
CODE = re.compile(r"(?<![A-Za-z0-9])(?!I\b)[A-Z]{1,2}[0-9]{0,3}(?![A-Za-z0-9])")


_CODE_TERM = re.compile(r"[a-z]{1,2}[0-9]{0,3}")


def codes_in(question: str) -> set[str]:
    """The codes of `question` ("D" in "D 类城市", "L2"): what it is about, however short."""
    return {match.group(0).lower() for match in CODE.finditer(question)}


@dataclass(frozen=True)
class Subject:
    """The question's subject: its terms, each weighted by how much it says (a rare word —
    gym, funeral, Hamburg — says more than a common one)."""

    terms: Mapping[str, float]
    # The terms a sentence must speak of when they weigh enough (`strong`): the question's own
    # nouns and names, not the words a follow-up took from its predecessor nor verbs and
    # measure words ("how soon", "最晚", "上报"), which a passage words differently.
    core: frozenset[str] | None = None
    # The terms a follow-up that points back ("request that", "change it") took from the
    # question before it: what it is still about. A passage about it speaks of them
    # (`speaks_of_carried`).
    carried: frozenset[str] = frozenset()
    # The question's own Chinese words that jieba reads as verbs (体检, 停车, 登记): not core,
    # unless a passage's heading names its topic by one ("四、年度体检"): `headed`.
    verbs: frozenset[str] = frozenset()

    def headed(self, context: str) -> Subject:
        """This subject with the `verbs` that a passage's document title or headings
        (`context`) use, as core terms: there the word names what the section is about, as a
        noun would."""
        if self.core is None or not self.verbs:
            return self
        named = self.verbs & set(words(context))
        if not named:
            return self
        return replace(self, core=self.core | named)

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def covered_by(self, present: Collection[str]) -> float:
        """The share of the subject's weight whose terms are in `present`."""
        if not self.terms or not self.total:
            return 0.0
        return sum(w for t, w in self.terms.items() if t in present) / self.total

    def strongest(self) -> str | None:
        return max(self.terms, key=lambda t: self.terms[t]) if self.terms else None

    def spoken_of(self, present: Collection[str], share: float, missing: float) -> bool:
        """Whether a sentence holding the terms `present` speaks of the subject: it holds the
        strongest term, and the strong terms (`strong`) it lacks weigh at most `missing` of
        theirs ("tool" may be missing from a sentence about hotels' own websites and the
        booking tool's offer; "gym" may not be missing from one about coworking
        memberships)."""
        strong = self.strong(share)
        if not strong:
            return True
        top = max(sorted(strong), key=lambda t: self.terms[t])
        if top not in present:
            return False
        lacking = sum(self.terms[t] for t in strong if t not in present)
        return lacking <= missing * sum(self.terms[t] for t in strong)

    def speaks_of_carried(self, present: Collection[str], share: float) -> bool:
        """Whether a passage holding the terms `present` speaks of the carried terms that weigh
        at least `share` of the strongest of them."""
        if not self.carried:
            return True
        top = max(self.terms.get(t, 0.0) for t in self.carried)
        return all(t in present for t in self.carried if self.terms.get(t, 0.0) >= share * top)

    def with_parts(self, present: Collection[str]) -> set[str]:
        """`present` with the terms that are part of a present term: a Chinese question's words
        come cut both ways (笔记本 and 笔记, 服务台 and 服务), and a sentence that speaks of a
        笔记本 (the embedder finds it in "laptop") speaks of its 笔记."""
        out = set(present)
        for part in self.terms:
            if part not in out and any(part in t for t in out if t != part and not t.isascii()):
                out.add(part)
        return out

    def strong(self, share: float) -> set[str]:
        """The terms that weigh at least `share` of the strongest one: what a sentence must
        speak of to be about the question (Hamburg in "the Wi-Fi range at our Hamburg office")."""
        eligible = {t: w for t, w in self.terms.items() if self.core is None or t in self.core}
        if not eligible:
            return set()
        top = max(eligible.values())
        return {t for t, w in eligible.items() if w >= share * top}


def subject(question: str, weight: Callable[[str], float] | None = None) -> Subject:
    """The question's subject, each term weighted by `weight` (1 each by default)."""
    terms = subject_terms(question)
    return Subject({t: (weight(t) if weight is not None else 1.0) for t in terms})


# Which of the subject's terms each sentence (with its heading) holds.
Presence = Callable[[Sequence[Sentence]], list[set[str]]]


def lexical_presence(subject_: Subject) -> Presence:
    """A term is present where the sentence or its heading uses the word (plural and -ly or
    -ing endings aside); a weekday also where the sentence gives a range of days holding it."""

    def present(sentences_: Sequence[Sentence]) -> list[set[str]]:
        out = []
        codes = [t for t in subject_.terms if _CODE_TERM.fullmatch(t) and not t.isalpha()]
        codes += [t for t in subject_.terms if len(t) == 1 and t.isalpha()]
        acronyms = [t for t in subject_.terms if 2 <= len(t) <= 4 and t.isascii() and t.isalpha()]
        days = [t for t in subject_.terms if weekday(t) is not None]
        for sentence in sentences_:
            held = {stem(w) for w in words(sentence.context) + words(sentence.text)}
            found = {t for t in subject_.terms if stem(t) in held and t not in codes}
            text = f"{sentence.context}\n{sentence.text}"
            found |= {t for t in codes if _held_code(t, text)}
            found |= {t for t in acronyms if t not in found and _spelt_out(t, text)}
            found |= {t for t in days if in_day_range(t, sentence.text)}
            out.append(subject_.with_parts(found))
        return out

    return present


def _spelt_out(acronym: str, text: str) -> bool:
    """Whether `text` spells `acronym` out in capitalised words: "EU" in "the European Union",
    "HR" in "Human Resources"."""
    pattern = r"\s+(?:(?:of|and|for|the|&)\s+)?".join(rf"{c.upper()}[a-z]+" for c in acronym)
    return re.search(rf"\b{pattern}\b", text) is not None


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CN_DAYS = "一二三四五六日"
_CN_WEEKDAY = re.compile(r"(?:星期|周|礼拜)([一二三四五六日天])")
_MONTH = re.compile(
    r"(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december)|[一二三四五六七八九十]{1,2}月"
)
_EN_DAY = r"(mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?"
_DAY_RANGE = re.compile(
    rf"\b{_EN_DAY}\s*(?:-|–|—|to|through|till|until)\s*{_EN_DAY}|"
    r"(?:星期|周|礼拜)([一二三四五六日天])\s*(?:至|到|-|–|—|~)\s*(?:星期|周|礼拜)?([一二三四五六日天])",
    re.IGNORECASE,
)


def calendar_word(term: str) -> bool:
    """A weekday or a month: one of a closed set whose members an embedder places close
    together (Wednesday and Friday over 0.7)."""
    return weekday(term) is not None or _MONTH.fullmatch(term) is not None


def weekday(term: str) -> int | None:
    """Monday 0 … Sunday 6, for a weekday's name (English, or 周三, 星期三, 礼拜三)."""
    english = stem(term.lower())
    for number, name in enumerate(_WEEKDAYS):
        if english == stem(name):
            return number
    match = _CN_WEEKDAY.fullmatch(term)
    return _CN_DAYS.index(match.group(1).replace("天", "日")) if match else None


def in_day_range(term: str, text: str) -> bool:
    """Whether `text` gives a range of days that holds the weekday `term` ("Monday to
    Thursday" holds Wednesday, "周一至周五" holds 周三)."""
    day = weekday(term)
    if day is None:
        return False
    for match in _DAY_RANGE.finditer(text):
        if match.group(1):
            ends = [[d[:3] for d in _WEEKDAYS].index(g.lower()) for g in match.group(1, 2)]
        else:
            ends = [_CN_DAYS.index(g.replace("天", "日")) for g in match.group(3, 4)]
        if ends[0] <= day <= ends[1]:
            return True
    return False
