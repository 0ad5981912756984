"""What a reply rests on, checked sentence by sentence.

A small model answers every question with the same confidence: it borrows a figure from the
passage next door (the meal per diem given as the mileage rate), or the wrong row of the right
table (the hotel cap of most cities given for Paris). A citation of the passage makes such a
reply look checked. So qassist checks the reply's *claims* itself, after the model, and shows
its work:

- **Claims** (`claims`): what an employee would act on — figures (amounts, days, dates, times,
  phone numbers), identifiers (`vpn.nwrobotics.example`, `NWR-Guest`) and names (`FortiClient`,
  `Meridian Assist`, `CFO`) the reply states and its question does not.
- **Sentences** (`knowledge.sentences`): each passage cut into sentences, lines and table
  rows (a row is one line that names its columns: "City class: A; Cities: London, Paris; Cap:
  EUR 220"), with their offsets, so the passage view can highlight what is quoted.
- **Support** (`check`): a claim is supported by a sentence that holds it *and* is about what
  was asked — the question's subject (`knowledge.subjects`: its rarest words in the tenant's
  documents, such as gym, funeral, mileage, Paris) is in the sentence or in its heading, or,
  across languages, the embedder finds the sentence close to the question (`about`). A claim
  held only by sentences about something else (48 EUR, the meal per diem, for a question about
  mileage) is not.
- **Quotes**: for each passage the reply rests on, the sentences that hold its supported
  claims — shown under the reply, so "160 EUR" stands next to "The nightly cap is EUR 160 in
  most cities and EUR 220 in Paris" and can be corrected at a glance.

Pure functions: the caller passes the embedder's similarities in (`Aboutness`); no database,
no model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from knowledge import asked as asking
from knowledge.quantities import DASHES, cn_value, outside, quantities
from knowledge.segment import STOPWORDS, words
from knowledge.sentences import Sentence, split_passage
from knowledge.subjects import CODE, Presence, Subject, lexical_presence, stem

# --- claims -------------------------------------------------------------------------------

FIGURE = "figure"
NAME = "name"

# A run of Chinese numerals counts as a figure when a measure follows it (十四天, 两小时, 三个月)
# or it holds a unit (十四): 一般, 统一 and 一下 are words, not numbers.
_CN_NUMBER = re.compile(
    r"[零一二两三四五六七八九十百千万]+(?=[天日周月年个次元小分岁人份张台项条%％])|"
    r"[零一二两三四五六七八九]*[十百千万][零一二两三四五六七八九十百千万]*"
)
_CITATION_MARK = re.compile(r"[\[【]\s*\d{1,3}(?:\s*[,，、]\s*\d{1,3})*\s*[\]】]")
_LIST_MARK = re.compile(r"^\s*(?:\d{1,2}[.)]|[-*•])\s+", re.M)
# The model citing a passage given to it in words: "根据第2段", "in passage 3", "source 1". A
# chapter or section number ("第4章第6节", "section 3.3") is the document's, and a claim.
_REFERENCE = re.compile(
    r"第\s*[\d一二三四五六七八九十]{1,3}\s*段|\b(?:passages?|sources?|paragraphs?)\s+\d{1,3}\b",
    re.I,
)
# Where the reply says it read something: "section 3.3", "chapter 4", "第3.3节", "第4章第6节".
_SECTION_REFERENCE = re.compile(
    r"第\s*(\d+(?:\.\d+)*|[一二三四五六七八九十]+)\s*[章节条款篇部]|"
    r"\b(?:section|chapter|clause|§)\s*(\d+(?:\.\d+)*)",
    re.I,
)
# The numbers of a passage's headings: "3. Devices / 3.3 Lost or stolen devices", "第四章 福利 /
# 六、交通与通讯补贴".
_HEADING_NUMBER = re.compile(
    r"\d+(?:\.\d+)*|第\s*([一二三四五六七八九十]+)\s*[章节条款篇部]|"
    r"(?:^|/)\s*([一二三四五六七八九十]+)\s*、"
)
# An identifier: letters and digits joined by . - @ _ (vpn.nwrobotics.example, NWR-Guest,
# it-help@…), a word with a capital inside (FortiClient, BitLocker) or in capitals (CFO, MFA).
_IDENTIFIER = re.compile(
    r"[A-Za-z0-9]+(?:[.\-@_][A-Za-z0-9]+)+|[A-Za-z]*[a-z][A-Z][A-Za-z]*|\b[A-Z]{2,}[0-9]*\b"
)
_ACRONYM = re.compile(r"[A-Z]{2,4}")
# The half of the day after a clock figure ("10:00 AM", "3 p.m."): a time's, not a name ("PM"
# alone may be a project manager).
_HALF_DAY = re.compile(r"(?<=\d)\s*(?:[AaPp]\.?[Mm]\.?)(?![A-Za-z])")
_CAPITALISED = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z]{2,}\b", re.M)
# Words a reply capitalises without naming anything checkable.
COMMON_NAMES = frozenset(
    """
    I EUR USD CNY RMB OK Yes No Note Please The This That These Those You Your It If For
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April
    May June July August September October November December
    """.split()  # noqa: SIM905 - a word list reads best as words
)


@dataclass(frozen=True)
class Claim:
    key: str  # normalised, as matched against sentences ("1500", "0.32", "forticlient")
    text: str  # as the reply writes it
    kind: str  # FIGURE or NAME


# A clock time's hour written with a leading zero (09:30, 09:00-18:00): 9:30 is the same time.
_CLOCK_HOUR = re.compile(r"(?<![\d.,:])0(\d:\d{2})(?![\d.,])")


def figure_key(text: str) -> str:
    """A figure as compared: thousands separators dropped (1,500 and 1.500 → 1500), a decimal
    comma made a point (0,32 → 0.32), full-width digits and dashes made ASCII, a clock time
    without its hour's leading zero (09:30 → 9:30)."""
    text = unicodedata.normalize("NFKC", text).translate(DASHES).strip(".,:-/")
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\.\d{3}){1,2}", text):
        text = text.replace(",", "") if "," in text else text.replace(".", "")
    elif re.fullmatch(r"\d+,\d{1,2}", text):
        text = text.replace(",", ".")
    return _CLOCK_HOUR.sub(r"\1", text)


def figure_parts(key: str) -> list[str]:
    """A range or a pair written in one piece (10:00-15:00, 8/10) as its figures."""
    return [part for part in re.split(r"[-/]", key) if part]


def figures(text: str) -> list[tuple[str, str]]:
    """(key, as written) for each figure of `text`, Chinese numerals included (十四 → 14)."""
    text = unicodedata.normalize("NFKC", text).translate(DASHES)
    out = [(figure_key(m.group(0)), m.group(0)) for m in asking.NUMBER.finditer(text)]
    for match in _CN_NUMBER.finditer(text):
        value = cn_value(match.group(0))
        if value is not None:
            out.append((str(value), match.group(0)))
    return [(key, written) for key, written in out if key]


def _identifier(token: str) -> bool:
    """vpn.nwrobotics.example, it-help@…, NWR-Guest, FortiClient, CFO: not sign-in, one-line."""
    if any(c in token for c in ".@_") or any(c.isdigit() for c in token):
        return True
    return sum(c.isupper() for c in token) >= 2


def names(text: str, is_common: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
    """(key, as written) for each identifier or name of `text`; a capitalised word that is an
    everyday word (`is_common`: Policy, Travel, Finance) is not a name."""
    found: dict[str, str] = {}
    text = _HALF_DAY.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        token = match.group(0)
        if not any(c.isalpha() for c in token) or token in COMMON_NAMES or not _identifier(token):
            continue
        found.setdefault(token.lower(), token)
    for match in _CAPITALISED.finditer(text):
        token = match.group(0)
        if token in COMMON_NAMES or (is_common is not None and is_common(token.lower())):
            continue
        found.setdefault(token.lower(), token)
    return list(found.items())


def without_marks(text: str) -> str:
    """`text` without its citation marks ([2], 【1】, "根据第2段", "passage 2") and list numbering
    (1., 2)): none is something a reply states."""
    return _LIST_MARK.sub(" ", _REFERENCE.sub(" ", _CITATION_MARK.sub(" ", text)))


def _number(text: str) -> str:
    value = cn_value(text) if not text[:1].isdigit() else None
    return str(value) if value is not None else figure_key(text)


def heading_numbers(contexts: Collection[str]) -> set[str]:
    """The chapter and section numbers of passages' headings, Chinese numerals as digits."""
    found: set[str] = set()
    for context in contexts:
        for match in _HEADING_NUMBER.finditer(context):
            found.add(_number(match.group(1) or match.group(2) or match.group(0)))
    return found


def without_headings(reply: str, numbers: Collection[str]) -> str:
    """`reply` without the references to sections whose numbers are among `numbers` ("according
    to section 3.3", "根据第4章第6节"): it names where it read what it says, as "[2]" does."""

    def drop(match: re.Match[str]) -> str:
        return " " if _number(match.group(1) or match.group(2)) in numbers else match.group(0)

    return _SECTION_REFERENCE.sub(drop, reply)


def claims(
    reply: str, question: str, is_common: Callable[[str], bool] | None = None
) -> list[Claim]:
    """What the reply states that its question does not: its figures, identifiers and names, in
    the order written (citation marks and list numbering aside; "一", one, is too common in
    Chinese phrasing — 一次, 一个 — to be a claim)."""
    reply = without_marks(reply)
    asked_figures = {key for key, _ in figures(question)}
    # As the question words them, or in another number ("on Wednesdays" for "On a Wednesday").
    asked_words = {stem(w) for w in words(question)}
    out: dict[str, Claim] = {}
    for key, written in figures(reply):
        if key not in asked_figures and written != "一":
            out.setdefault(key, Claim(key, written, FIGURE))
    for key, written in names(reply, is_common):
        parts = {stem(w) for w in words(written)}
        if stem(key) in asked_words or (parts and parts <= asked_words):
            continue
        if key in out or any(key in c.key for c in out.values()):
            continue
        out.setdefault(key, Claim(key, written, NAME))
    return list(out.values())


def sentence_keys(sentence: Sentence) -> set[str]:
    """What a claim is looked up in: the sentence's figures and words (its heading aside)."""
    keys: set[str] = set()
    for key, _ in figures(sentence.text):
        keys.add(key)
        keys.update(figure_parts(key))
    keys.update(words(sentence.text))
    keys.update(key for key, _ in names(sentence.text))
    return keys


def holds(sentence: Sentence, claim: Claim, keys: set[str] | None = None) -> bool:
    if claim.kind == NAME and _ACRONYM.fullmatch(claim.text):
        # "IT" is no "it", "US" no "us": an acronym is held as written.
        return re.search(rf"(?<![A-Za-z]){claim.text}(?![A-Za-z])", sentence.text) is not None
    keys = sentence_keys(sentence) if keys is None else keys
    if claim.key in keys:
        return True
    if claim.kind == FIGURE:
        parts = figure_parts(claim.key)
        return len(parts) > 1 and all(p in keys for p in parts)
    if claim.kind == NAME:
        parts = words(claim.text)
        return bool(parts) and all(p in keys for p in parts)
    return False


# --- the check ------------------------------------------------------------------------------

SUPPORTED = "supported"  # every claim held by a sentence about what was asked
UNSUPPORTED = "unsupported"  # a claim no sentence about what was asked holds
NOTHING_TO_CHECK = "nothing"  # the reply states no figure or name (a decline, "yes")

# A sentence is about what was asked when it (with its heading) holds this share of the
# subject's weight, or when the embedder finds it this close to the question (across
# languages). Tuned on bench/rag_eval's tuning half (docs/BENCHMARKS.md).
ABOUT_COVERAGE = 0.3
ABOUT_SIMILARITY = 0.45
# ...and speaks of the terms of the subject that weigh at least this share of the strongest:
# of the strongest one, and of all but this share of their weight (`Subject.spoken_of`).
STRONG_SHARE = 0.5
STRONG_MISSING = 0.25
# A reply sentence that holds a passage's sentence of at least this many words word for word
# reads the passage out (`_copied`).
COPIED_WORDS = 3


Similarity = Callable[[Sequence[Sentence]], Sequence[float]]


@dataclass(frozen=True)
class Thresholds:
    coverage: float = ABOUT_COVERAGE
    similarity: float = ABOUT_SIMILARITY
    strong_share: float = STRONG_SHARE
    strong_missing: float = STRONG_MISSING


@dataclass
class Check:
    """A reply checked against its passages."""

    verdict: str
    supported: list[Claim] = field(default_factory=list)
    unsupported: list[Claim] = field(default_factory=list)
    # Passage number -> the sentences quoted from it, in the passage's order.
    quotes: dict[int, list[Sentence]] = field(default_factory=dict)
    # The sentence closest to what was asked, whatever the reply said: "the closest they come".
    closest: Sentence | None = None
    # The question's strong terms that no passage speaks of (a gym, a funeral, Hamburg).
    absent: list[str] = field(default_factory=list)
    # Figures held by a sentence about the question but of another kind than it asks for (a
    # fee given for a deadline): claim as written -> its kind (`knowledge.asked`). They are
    # among `unsupported`.
    mismatched: dict[str, str] = field(default_factory=dict)
    # The measure word a Chinese count question asks in ("位"), when it asks for no kind: then
    # `mismatched` holds the figures that count in another one -> theirs ("18" -> "层").
    measure: str | None = None
    asked: str | None = None  # the kind of figure the question asks for, when it says
    # For a reply with nothing to check: the sentence about the question that holds the words
    # it adds to the question ("Thursday", "机密"), its answer in the documents' words.
    echoed: Sentence | None = None
    # When `echoed` is a table row whose words the reply takes from another column than the one
    # the question names (L4's rule, asked about L3): that column's header.
    other_column: str | None = None

    @property
    def cited(self) -> list[int]:
        return sorted(self.quotes)


def aboutness(
    sentences_: Sequence[Sentence],
    subject_: Subject,
    similarity: Similarity | None,
    presence: Presence | None = None,
) -> list[tuple[float, float]]:
    """(subject coverage, embedder similarity) of each sentence, its heading counted in."""
    present = (presence or lexical_presence(subject_))(sentences_) if sentences_ else []
    return _scores(sentences_, subject_, similarity, present)


def _scores(
    sentences_: Sequence[Sentence],
    subject_: Subject,
    similarity: Similarity | None,
    present: Sequence[set[str]],
) -> list[tuple[float, float]]:
    sims = list(similarity(sentences_)) if similarity is not None and sentences_ else []
    return [
        (subject_.covered_by(present[i]), sims[i] if i < len(sims) else 0.0)
        for i in range(len(sentences_))
    ]


def cells(text: str) -> list[tuple[str, str]] | None:
    """A table row as the parsers write it, "Header: value; Header: value", as (header, value)
    pairs; None for any other sentence."""
    parts = [p.strip() for p in re.split(r"[;；]", text) if p.strip()]
    if len(parts) < 2:
        return None
    row = []
    for part in parts:
        header, sep, value = _cell(part)
        if not sep or not header.strip() or len(header) > 60:
            return None
        row.append((header.strip(), value.strip()))
    return row


def _cell(part: str) -> tuple[str, str, str]:
    match = re.match(r"([^:：]*)([:：])(.*)", part)
    return (match.group(1), match.group(2), match.group(3)) if match else (part, "", "")


def _siblings(a: str, b: str) -> bool:
    """Two headers of a row that name alike things: both with a code ("L2 内部", "L3 机密";
    "Class A", "Class B"), or the same words but one ("Munich office", "Shanghai office")."""
    if CODE.search(a) and CODE.search(b):
        return True
    wa, wb = words(a), words(b)
    return len(wa) == len(wb) > 1 and sum(x != y for x, y in zip(wa, wb, strict=True)) == 1


def other_cell(
    sentence: Sentence,
    claim: Claim,
    presence: Presence,
    core: Collection[str] | None = None,
) -> bool:
    """Whether `sentence` is a table row that holds `claim` only under another column than the
    one the question names, of the same kind: "L3 机密: 合同结束后 5 年" for a question about L2,
    in a row that also has "L2 内部: 按业务需要". Such a row is about the question,
    and the figure is in it, but not as the answer: a citation would make the wrong figure look
    checked. Only the question's own terms (`core`: not those a follow-up took from the question
    before it, which named L3) name a column."""
    row = cells(sentence.text)
    if row is None:
        return False
    values = [Sentence(sentence.number, 0, 0, value) for _, value in row]
    holding = [i for i, value in enumerate(values) if holds(value, claim)]
    outranked = _outranked(sentence.number, row, presence, core)
    return bool(holding) and all(outranked[i] for i in holding)


def _outranked(
    number: int, row: Sequence[tuple[str, str]], presence: Presence, core: Collection[str] | None
) -> list[bool]:
    """For each column of a table row: whether a sibling column's header (`_siblings`) names
    more of the question than its own. Only the question's own terms (`core`) name a column."""
    heads = presence([Sentence(number, 0, 0, header) for header, _ in row])
    if core is not None:
        heads = [held & set(core) for held in heads]
    return [
        any(heads[j] > heads[i] and _siblings(row[i][0], row[j][0]) for j in range(len(row)))
        for i in range(len(row))
    ]


def _other_column(
    reply: str,
    question: str,
    sentence: Sentence,
    presence: Presence,
    core: Collection[str] | None,
) -> str | None:
    """The header of the column of the table row `sentence` that holds most of the words
    `reply` adds to `question`, when a sibling column's header names more of the question
    (`other_cell`'s rule for words rather than a figure): "交信息安全办公室统一销毁并记录", L4's
    way of destroying a file, asked about L3. None otherwise."""
    row = cells(sentence.text)
    if row is None:
        return None
    added = set(words(reply)) - set(words(question)) - STOPWORDS
    shared = [len(added & set(words(value))) for _, value in row]
    best = max(range(len(row)), key=lambda i: shared[i])
    if shared[best] < 2:
        return None
    return row[best][0] if _outranked(sentence.number, row, presence, core)[best] else None


def other_condition(sentence: Sentence, claim: Claim, asked: Sequence[tuple[float, str]]) -> bool:
    """Whether `sentence` is a table row whose condition leaves out a quantity the question
    states (`asked`): "10 years or more; … 30 days" for "工作满七年的员工…", seven years. The row
    is about the question, and "30" is in it, but not as the answer for seven years. The cells
    that hold the claim are no condition of it."""
    row = cells(sentence.text) if asked else None
    if row is None:
        return False
    conditions = [
        (header, value)
        for header, value in row
        if not holds(Sentence(sentence.number, 0, 0, value), claim)
    ]
    return outside(asked, conditions)


def _speaking(
    held: Mapping[int, set[str]], subjects_: Mapping[int, Subject], thresholds: Thresholds
) -> dict[int, bool]:
    """Passage number -> whether its sentences together (`held`: the subject's terms each
    passage holds) speak of its subject (`subjects_`, per passage: `Subject.headed`), as
    `Subject.spoken_of` asks of one sentence, cover enough of it, and speak of what a follow-up
    pointing back carries over."""
    out: dict[int, bool] = {}
    for number, terms in held.items():
        subject_ = subjects_[number]
        out[number] = (
            subject_.spoken_of(terms, thresholds.strong_share, thresholds.strong_missing)
            and subject_.covered_by(terms) >= thresholds.coverage
            and subject_.speaks_of_carried(terms, thresholds.strong_share)
        )
    return out


def _copied(said: Sentence, source: Sentence) -> bool:
    """Whether the reply's sentence `said` holds the passage's sentence `source` whole, word
    for word (a sentence of `COPIED_WORDS` words or more): the model read it out."""
    words_ = words(source.text)
    if len(words_) < COPIED_WORDS:
        return False
    return f" {' '.join(words_)} " in f" {' '.join(words(said.text))} "


def _echoed(
    reply: str,
    question: str,
    sentences_: Sequence[Sentence],
    about: Sequence[bool],
    scores: Sequence[tuple[float, float]],
) -> Sentence | None:
    """The sentence about the question that holds most of the words `reply` adds to it (stop
    words aside), the one most about it first; None when no such sentence holds any."""
    added = set(words(reply)) - set(words(question)) - STOPWORDS
    best, best_key = None, (0, 0.0)
    for i, sentence in enumerate(sentences_):
        if not about[i]:
            continue
        key = (len(added & set(words(sentence.text))), scores[i][0] + scores[i][1])
        if key[0] and key > best_key:
            best, best_key = sentence, key
    return best


def _continues(before: Sentence, after: Sentence) -> bool:
    """Whether `after` is the clause that follows `before` after a "；" in the same line."""
    return (
        before.number == after.number
        and before.text.endswith(("；", ";"))
        and 0 <= after.start - before.end <= 1
    )


def _beside_about(
    sentences_: Sequence[Sentence],
    about: Sequence[bool],
    speaks: Mapping[int, bool],
) -> list[bool]:
    """Which sentences, not about the question themselves, stand next to one that is, in a
    passage that `speaks` of the subject (`_speaking`): a passage says what it is
    about once ("…a phishing email you clicked…") and gives the figure in the next sentence
    ("Report every suspected incident within 2 hours"). Not a table's row, nor beside one: a
    row says what it is about in its own cells, and the rows around the one asked about hold
    the other cases' figures (a wedding's 2 days beside a grandparent's 1 day)."""
    rows = [cells(s.text) is not None for s in sentences_]
    out = []
    for i, sentence in enumerate(sentences_):
        neighbours = [j for j in (i - 1, i + 1) if 0 <= j < len(sentences_)]
        out.append(
            not about[i]
            and not rows[i]
            and speaks[sentence.number]
            and any(
                about[j] and not rows[j] and sentences_[j].number == sentence.number
                for j in neighbours
            )
        )
    return out


def is_about(score: tuple[float, float], thresholds: Thresholds) -> bool:
    cover, sim = score
    return cover >= thresholds.coverage or sim >= thresholds.similarity


def check(
    reply: str,
    question: str,
    passages: Mapping[int, tuple[str, str]],
    subject_: Subject,
    *,
    similarity: Similarity | None = None,
    presence: Presence | None = None,
    thresholds: Thresholds | None = None,
    is_common: Callable[[str], bool] | None = None,
    asked: str | None = None,
) -> Check:
    """Check `reply` to `question` against `passages` (number -> (text, context)): which claims
    a sentence about the question holds, which none does, and what to quote. `asked`: the kind
    of figure asked for, when the conversation says it and the question does not."""
    thresholds = thresholds or Thresholds()
    # Under a heading that names its topic by a word the question uses as a verb, that word is
    # the subject too ("今年的免费体检最晚要在什么时候做完？" under "四、年度体检").
    per_passage = {n: subject_.headed(c) for n, (_, c) in passages.items()}
    all_sentences = [s for n, (t, c) in sorted(passages.items()) for s in split_passage(n, t, c)]
    present = (presence or lexical_presence(subject_))(all_sentences) if all_sentences else []
    scores = _scores(all_sentences, subject_, similarity, present)
    strong = subject_.strong(thresholds.strong_share)
    about = [
        is_about(score, thresholds)
        and per_passage[all_sentences[i].number].spoken_of(
            present[i], thresholds.strong_share, thresholds.strong_missing
        )
        for i, score in enumerate(scores)
    ]
    # A clause after "；" goes on with the sentence before it ("…每月另加 300 元远途通勤补贴；须在
    # PeopleHub 中登记住址…"): it is about what that sentence is about.
    for i in range(1, len(all_sentences)):
        if not about[i] and about[i - 1] and _continues(all_sentences[i - 1], all_sentences[i]):
            about[i] = True
    held: dict[int, set[str]] = {}  # the subject's terms each passage holds
    for sentence, terms in zip(all_sentences, present, strict=True):
        held.setdefault(sentence.number, set()).update(terms)
    # A follow-up that points back is about its predecessor's subject too: a sentence in a
    # passage that never speaks of it ("Request it at least 3 months before…" of a sabbatical,
    # for "request that" after working from the EU) is not about it.
    for i, sentence in enumerate(all_sentences):
        if about[i] and not subject_.speaks_of_carried(
            held[sentence.number], thresholds.strong_share
        ):
            about[i] = False
    speaks = _speaking(held, per_passage, thresholds)
    beside = _beside_about(all_sentences, about, speaks)
    closest = None
    if all_sentences:
        best = max(range(len(all_sentences)), key=lambda i: (scores[i][0] + scores[i][1], -i))
        closest = all_sentences[best]
    spoken = set().union(*present) if present else set()
    absent = sorted(strong - spoken, key=lambda t: -subject_.terms[t])
    # A name the passages' own titles and headings use (the company's, a policy's) is where the
    # reply read it, not a claim to check.
    titles = {w for s in all_sentences for w in words(s.context)}
    # So are the numbers of the headings it names: "根据第4章第6节", under "第四章 … / 六、…".
    headed = heading_numbers({c for _, c in passages.values()})
    found = [
        c
        for c in claims(without_headings(reply, headed), question, is_common)
        if c.kind != NAME or not set(words(c.text)) <= titles
    ]
    kind = asked or asking.asked_kind(question)
    if not found:
        echoed = _echoed(reply, question, all_sentences, about, scores)
        return Check(
            NOTHING_TO_CHECK,
            closest=closest,
            absent=absent,
            asked=kind,
            echoed=echoed,
            other_column=(
                None
                if echoed is None
                else _other_column(
                    reply, question, echoed, presence or lexical_presence(subject_), subject_.core
                )
            ),
        )
    keys = [sentence_keys(s) for s in all_sentences]
    measure = None if kind else asking.asked_measure(question)
    result = Check(SUPPORTED, closest=closest, absent=absent, asked=kind, measure=measure)
    # Figures of another kind than asked for, when none of the reply's is of that kind; for a
    # count asked in a measure word, figures in another one ("18层" for "几位").
    written = [c.text for c in found if c.kind == FIGURE]
    wrong_kind = (
        asking.mismatched(question, without_marks(reply), written, asked=kind)
        if kind
        else asking.mismatched_measure(without_marks(reply), written, measure)
        if measure
        else {}
    )
    chosen: dict[int, Sentence] = {}
    presence_ = presence or lexical_presence(subject_)
    stated = quantities(question)  # "工作满七年": a row for ten years or more is not the answer

    def fits(i: int, claim: Claim) -> bool:
        sentence = all_sentences[i]
        return not other_cell(sentence, claim, presence_, subject_.core) and not (
            other_condition(sentence, claim, stated)
        )

    said = split_passage(0, without_marks(reply))
    for claim in found:
        holding = [i for i, s in enumerate(all_sentences) if holds(s, claim, keys[i])]
        good = [i for i in holding if about[i] and fits(i, claim)]
        if not good and kind is not None and claim.kind == FIGURE:
            # A figure of a sentence that gives what is asked for (a time, an amount), next to a
            # sentence about the question, in a passage that speaks of it: "Report every
            # suspected incident within 2 hours" after the one that names the phishing email.
            good = [
                i
                for i in holding
                if beside[i] and asking.gives(kind, all_sentences[i].text) and fits(i, claim)
            ]
        if not good:
            # A sentence the reply copies word for word, from a passage about the question: the
            # password rules read out in full, not only the line asked about. Only where every
            # sentence of the reply that states it is such a copy: a conclusion drawn after the
            # rows read out ("so you get 2 days") is the model's own.
            stating = [r for r in said if holds(r, claim)]
            copies = [
                (j, i)
                for j, r in enumerate(stating)
                for i in holding
                if speaks[all_sentences[i].number] and _copied(r, all_sentences[i])
            ]
            if stating and {j for j, _ in copies} == set(range(len(stating))):
                good = sorted({i for _, i in copies})
        if not good:
            result.unsupported.append(claim)
            continue
        if claim.text in wrong_kind:
            # Held by a sentence about the question, but not what it asks: no citation.
            result.unsupported.append(claim)
            result.mismatched[claim.text] = wrong_kind[claim.text]
            continue
        result.supported.append(claim)
        # A sentence quoted already for another claim, else the one most about the question.
        pick = next((i for i in good if i in chosen), None)
        if pick is None:
            pick = max(good, key=lambda i: (scores[i][0] + scores[i][1], -i))
        chosen[pick] = all_sentences[pick]
    if result.supported:
        # A sentence about the question that the reply reads out is what it rests on, figures
        # or not ("No forced periodic change: change your password only when…").
        for i, sentence in enumerate(all_sentences):
            if about[i] and any(_copied(r, sentence) for r in said):
                chosen.setdefault(i, sentence)
    if result.unsupported:
        result.verdict = UNSUPPORTED
    for index in sorted(chosen):
        sentence = chosen[index]
        result.quotes.setdefault(sentence.number, []).append(sentence)
    return result
