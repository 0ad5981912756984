"""The support check on a reply, with the database and the embedder (knowledge.evidence is the
pure part).

When a reply from company knowledge ends, its claims (figures, identifiers, names) are looked
up sentence by sentence in the passages of its conversation — the question's own and those
earlier questions were given — and kept only where a sentence about what was asked holds them.
What comes out is stored with the reply (`Message.evidence`) and drives what the reader sees:

- every claim supported: the passages are cited (" [2]") and the sentences quoted under the
  reply, highlighted in the passage view;
- a claim no sentence about the question holds: the explicit warning naming it, and no
  citation for it; in "documents only" mode the reply is replaced by what the documents do say
  ("The documents don't say this. The closest they come is: …");
- nothing to check (a decline, a yes): the passages its words come from are cited as before
  (knowledge.citations), with the not-found note for words no passage holds.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge import (
    answerability,
    citations,
    evidence,
    followups,
    glossary,
    index,
    services,
    subjects,
)
from knowledge import asked as asking
from knowledge.access import PUBLIC, Reader, reader_for_session
from knowledge.embeddings import get_embedder
from knowledge.models import Chunk, KnowledgeBase, Passage
from knowledge.parsers.base import is_cjk
from knowledge.prompt import cited_numbers
from knowledge.segment import words
from knowledge.sentences import Sentence, split_passage

WARNING = (
    "\n\n*Not in the documents: {claims}. No passage found for this question says this; check "
    "it before relying on it.*"
)
WARNING_ZH = "\n\n*文档中没有依据：{claims}。为这个问题找到的段落都没有这样说，请核实后再使用。*"
# A reply with no figure or name, adding at least `OFF_SUBJECT_WORDS` words to its question,
# whose words come only from sentences about something else.
OFF_SUBJECT_WORDS = 2
# A passage's sentence of at least this many characters found whole in a reply was copied.
COPIED_CHARACTERS = 12
OFF_SUBJECT = (
    "\n\n*Not from a passage about this question: the documents' words it uses are about "
    "something else; check it before relying on it.*"
)
OFF_SUBJECT_ZH = "\n\n*文档中没有依据：回答用到的文档内容讲的是别的事情，请核实后再使用。*"
# A figure of another kind than the question asks for (`knowledge.asked`): a fee for a deadline.
MISMATCH = (
    "\n\n*Not what was asked: the question asks for {asked}; the reply gives {claims}. Check "
    "it before relying on it.*"
)
MISMATCH_ZH = "\n\n*可能答非所问：问题问的是{asked}，回答给出的是{claims}，请核实后再使用。*"
NO_ANSWER = (
    "\n\n*Not what was asked: the question asks for {asked}, and the reply gives none. Check "
    "the documents before relying on it.*"
)
# A reply with nothing to check whose words a table row gives under another column than the
# question names (`evidence.Check.other_column`).
OTHER_COLUMN = (
    "\n\n*Not what was asked: the documents say this under “{column}”, not under what the "
    "question asks about. Check it before relying on it.*"
)
OTHER_COLUMN_ZH = (
    "\n\n*可能答非所问：文档中这是“{column}”一栏的规定，不是所问的那一项，请核实后再使用。*"
)
NO_ANSWER_ZH = "\n\n*可能答非所问：问题问的是{asked}，回答中没有给出，请核实文档后再使用。*"
KINDS = {
    asking.TIME: "a time or a number of days",
    asking.MONEY: "an amount of money",
    asking.PERCENT: "a percentage",
}
KINDS_ZH = {asking.TIME: "时间或天数", asking.MONEY: "金额", asking.PERCENT: "比例"}
ABSENT = (
    "\n\n*Not in the documents: nothing found for this question is about {terms}; check it "
    "before relying on it.*"
)
ABSENT_ZH = "\n\n*文档中没有依据：为这个问题找到的段落都没有涉及“{terms}”，请核实后再使用。*"
REPLACED = "The documents don't say this. The closest they come is: “{quote}” [{number}]"
REPLACED_ZH = "文档中没有这方面的说明。最接近的是：“{quote}” [{number}]"
NOT_COVERED = "The documents don't cover this. The closest they come is: “{quote}” [{number}]"
NOT_COVERED_ZH = "文档中没有涉及这个问题。最接近的是：“{quote}” [{number}]"


def chinese(text: str) -> bool:
    letters = [c for c in text if c.isalnum()]
    return bool(letters) and sum(is_cjk(c) for c in letters) * 5 >= len(letters)


# --- sentences and their vectors ------------------------------------------------------------

_VECTORS_KEPT = 4096  # sentences' vectors kept per process (a few MB), least recently used out
_vectors: OrderedDict[tuple[str, bool, str], np.ndarray] = OrderedDict()
_vectors_lock = threading.Lock()


def _embed_cached(texts: Sequence[str], *, keep: int, query: bool) -> np.ndarray:
    """The embedder's vectors of `texts`, from this process's cache when it holds them."""
    embedder = get_embedder()
    with _vectors_lock:
        missing = list(dict.fromkeys(t for t in texts if (embedder.name, query, t) not in _vectors))
    if missing:
        fresh = embedder.embed_queries(missing) if query else embedder.embed_passages(missing)
    with _vectors_lock:
        if missing:
            for text, vector in zip(missing, fresh, strict=True):
                _vectors[(embedder.name, query, text)] = vector
        rows = []
        for text in texts:
            _vectors.move_to_end((embedder.name, query, text))
            rows.append(_vectors[(embedder.name, query, text)])
        while len(_vectors) > max(keep, _VECTORS_KEPT):
            _vectors.popitem(last=False)
    return np.vstack(rows) if rows else np.zeros((0, 1), dtype=np.float32)


def _embed_sentences(texts: Sequence[str]) -> np.ndarray:
    return _embed_cached(texts, keep=_VECTORS_KEPT, query=False)


def similarity_to(question: str) -> evidence.Similarity:
    """How close each sentence (with its heading) is to `question`, by the embedder: the
    support check's way across languages."""

    def measure(sentences: Sequence[Sentence]) -> list[float]:
        if not sentences:
            return []
        q = get_embedder().embed_queries([question])[0]
        vectors = _embed_sentences([f"{s.context}\n{s.text}".strip() for s in sentences])
        return [float(v) for v in vectors @ q]

    return measure


# A word that common in everyday language (wordfreq's Zipf scale: "soon" 5.3, "如果" 6.0) says
# nothing about what a question asks; rarer ones say more ("motorbike" 3.2, "慰问金" 2.9).
COMMON_ZIPF = 6.0
# Two words this close by the embedder are the same term across languages or spellings
# (Shanghai/上海 0.92, password/密码 0.88, gym/健身房 0.77; Eindhoven/Munich 0.43,
# London/Paris 0.54, hostname/gateway 0.30: measured with USE multilingual v3).
TERM_SIMILARITY = 0.7
# Across scripts the embedder places a word and its translation less close (病假/sickness 0.64,
# 加密/encryption 0.67, 审批/approve 0.64, 无线/Wi-Fi 0.67, 慕尼黑/Munich 0.605, 前台/reception
# 0.61, 母亲/parent 0.62; 埃因霍温/Munich 0.29, 病假/leave 0.40, 商务舱/economy 0.36, 服务台/
# helpdesk 0.52): a Chinese term and an English word are the same term from this.
CROSS_TERM_SIMILARITY = 0.60


CODE_INFORMATIVENESS = 3.0


def informativeness(term: str) -> float:
    """How much a question's word says about what it asks: rare words most."""
    from wordfreq import zipf_frequency

    language = "zh" if any(is_cjk(c) for c in term) else "en"
    return max(0.25, COMMON_ZIPF - zipf_frequency(term, language))


def common_word(word: str) -> bool:
    """An everyday word ("policy", "travel"): capitalised in a reply, it names nothing."""
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "en") >= 4.0


def subject_of(
    *,
    tenant_id: int,
    session_id: object,
    question: str,
    inherited: Collection[str] = (),
    reader: Reader = PUBLIC,
) -> subjects.Subject:
    """The question's subject: each term weighted by how much it says in everyday language and
    how few of the tenant's passages use it (the company's own name, in every title, says
    little); terms a follow-up took from the question before it count half."""
    terms = subjects.subject_terms(question)
    counts, total = index.document_frequencies(
        tenant_id=tenant_id, session_id=session_id, words=terms, reader=reader
    )
    spread = math.log(total + 1) or 1.0
    weights = {}
    codes = subjects.codes_in(question)
    for term in terms:
        rarity = math.log((total + 1) / (counts.get(term, 0) + 0.5)) / spread
        # A code ("D", "L2") says as much as a rare word, however common its letters are.
        says = CODE_INFORMATIVENESS if term in codes else informativeness(term)
        weight = says * min(1.0, max(0.05, rarity))
        weights[term] = weight * (0.5 if term in inherited else 1.0)
    tagged = _chinese_tags(question)
    nouns = [word for word, flag in tagged if _noun_tag(flag)]
    core = frozenset(t for t in terms if t not in inherited and _names(t, question, nouns))
    # What a "how many" question counts is its answer's unit, as 位 is of 几位: a passage may
    # count in another word ("6 次免费一对一心理咨询" for "how many free counselling sessions").
    counted = asking.counted_noun(question)
    if counted in core and len(core) > 1:
        core = core - {counted}
    # "How far in advance do I have to request that?": still about working from the EU.
    carried = (
        frozenset(t for t in terms if t in inherited and _names(t, question, nouns))
        if followups.points_back(question)
        else frozenset()
    )
    said = {word for word, flag in tagged if flag == "v"}
    verbs = frozenset(t for t in terms if t not in inherited and t not in core and t in said)
    return subjects.Subject(weights, core, carried, verbs)


def _names(term: str, question: str, chinese_nouns: Sequence[str]) -> bool:
    if any(is_cjk(c) for c in term):
        return any(term in noun for noun in chinese_nouns)
    return names_a_thing(term, question)


def names_a_thing(word: str, question: str = "") -> bool:
    """Whether an English word of a question can name what it is about: a noun or an adjective
    in the lexicon (closing, gym, unused, annual), a word the lexicon does not know (a term:
    FortiClient, hostname), or one the question capitalises (Shanghai, which the lexicon knows
    only as a verb). A word that can only be a verb or an adverb ("planned", "clicked",
    "connect", "transferring") says what is done, and a passage words that differently: it does
    not decide which sentences are about the question."""
    from lemminflect import getAllLemmas

    readings = getAllLemmas(word.removesuffix("'s"))
    if not readings or {"NOUN", "PROPN", "ADJ"} & set(readings):
        return True
    return re.search(rf"\b{re.escape(word[:1].upper() + word[1:])}\b", question) is not None


def _noun_tag(flag: str) -> bool:
    return flag.startswith("n") or flag in ("vn", "eng")


def _chinese_tags(question: str) -> list[tuple[str, str]]:
    """(word, jieba tag) for each word of a question, read in context: nouns and names
    (`_noun_tag`: 年金, 门禁卡, 安卓), verbs ("v": 体检, 停车)."""
    if not any(is_cjk(c) for c in question):
        return []
    import jieba.posseg

    return [(pair.word, pair.flag) for pair in jieba.posseg.cut(question)]


_words_kept = 50_000  # words' vectors kept per process (about 100 MB), least recently used out


def _embed_words(texts: Sequence[str]) -> np.ndarray:
    return _embed_cached(texts, keep=_words_kept, query=False)


def presence(subject: subjects.Subject) -> subjects.Presence:
    """Which subject terms each sentence (with its heading) holds: the word itself, or a word
    the embedder finds the same term (across languages: a Chinese question's 密码 is an English
    sentence's password)."""
    lexical = subjects.lexical_presence(subject)

    def present(sentences: Sequence[Sentence]) -> list[set[str]]:
        found = lexical(sentences)
        # An acronym of two or three Latin letters (EU, HR, PC) is next to nothing to the
        # embedder: it found "EU" in "Request it…". Such a term is looked for as written, or
        # spelt out. A three-letter word (ill, gym, car) is a word like any other: "ill" is
        # "sick" (0.85).
        terms = [t for t in subject.terms if not (t.isascii() and len(t) <= 3 and not _word(t))]
        if not terms or not sentences:
            return found
        per_sentence = [
            _with_singulars(
                {w for w in words(f"{s.context} {s.text}") if len(w) > 1 and not w.isdigit()}
            )
            for s in sentences
        ]
        # The dictionary first: a translation the embedder places too far (埃因霍温/Eindhoven).
        for i, held in enumerate(per_sentence):
            found[i] |= _translated(terms, held)
        # A weekday or a month is one of a closed set whose members the embedder places close
        # together (Wednesday and Friday over 0.7): it is found as written, translated or in a
        # range of days, never by the embedder.
        terms = [t for t in terms if not subjects.calendar_word(t)]
        vocabulary = sorted(set().union(*per_sentence))
        if not vocabulary or not terms:
            return [subject.with_parts(terms) for terms in found]
        index = {w: i for i, w in enumerate(vocabulary)}
        similar = _embed_words(terms) @ _embed_words(vocabulary).T
        crossed = np.array([[is_cjk(t[0]) != is_cjk(w[0]) for w in vocabulary] for t in terms])
        close = similar >= np.where(crossed, CROSS_TERM_SIMILARITY, TERM_SIMILARITY)
        for i, held in enumerate(per_sentence):
            columns = [index[w] for w in held]
            for j, term in enumerate(terms):
                if term not in found[i] and close[j, columns].any():
                    found[i].add(term)
        return [subject.with_parts(terms) for terms in found]

    return present


def _with_singulars(held: set[str]) -> set[str]:
    """`held` with the singular of each English plural: the embedder places a word nearer its
    singular's neighbours ("fly" is 0.81 from "flight", 0.67 from the heading's "Flights")."""
    from lemminflect import getLemma

    singulars: set[str] = set()
    for word in held:
        if word.isascii() and word.endswith("s") and len(word) > 3:
            singulars.update(getLemma(word, upos="NOUN", lemmatize_oov=False))
    return held | singulars


def _word(term: str) -> bool:
    """Whether a short Latin term is a word rather than an acronym: three letters the lexicon
    knows (ill, gym, tax; not VPN, CEO). Two letters never are: the lexicon knows "it", "id"
    and "ai", which a question writes as acronyms (IT, ID, AI)."""
    from lemminflect import getAllLemmas

    return len(term) == 3 and bool(getAllLemmas(term))


def _translated(terms: Sequence[str], held: Collection[str]) -> set[str]:
    """The `terms` a sentence holding the words `held` says in the other language, by the
    dictionary (knowledge.glossary): 证明 in "…the A1 certificate…", "Eindhoven" in 埃因霍温."""
    english = {glossary.stem(w) for w in held if w.isascii()}
    chinese_words = [w for w in held if is_cjk(w[0])]
    return {
        t
        for t in terms
        if (
            glossary.in_english(t, english)
            if is_cjk(t[0])
            else chinese_words and glossary.in_chinese(t, chinese_words)
        )
    }


def chunk_context(chunk: Chunk) -> str:
    """What a passage's sentences are about beyond themselves: its document and section path."""
    return f"{chunk.document.title} / {chunk.headings.replace(' › ', ' / ')}".strip(" /")


def context_of(passage: Passage) -> str:
    chunk = passage.chunk
    headings = chunk.headings.replace(" › ", " / ") if chunk is not None else passage.where
    return f"{passage.title} / {headings}".strip(" /")


# --- before generation ----------------------------------------------------------------------


def question_signals(
    *,
    tenant_id: int,
    session_id: object,
    question: str,
    passages: Mapping[int, tuple[str, str]],
    retrieval_similarity: float,
    inherited: Collection[str] = (),
    reader: Reader = PUBLIC,
) -> tuple[answerability.Signals, Sentence | None]:
    """The answerability signals of `question` (made standalone; `inherited`: the subject words
    it took from the question before it) against the passages it would be given, and the
    sentence closest to it."""
    subject = subject_of(
        tenant_id=tenant_id,
        session_id=session_id,
        question=question,
        inherited=inherited,
        reader=reader,
    )
    sentences = [s for n, (t, c) in sorted(passages.items()) for s in split_passage(n, t, c)]
    similarities = similarity_to(question)(sentences)
    present = presence(subject)(sentences) if sentences else []
    found = answerability.signals(subject, sentences, similarities, retrieval_similarity, present)
    scores = evidence.aboutness(sentences, subject, lambda _: similarities, lambda _: present)
    closest = None
    if sentences:
        best = max(range(len(sentences)), key=lambda i: (scores[i][0] + scores[i][1], -i))
        closest = sentences[best]
    return found, closest


def not_covered_text(closest: Sentence, *, chinese: bool) -> str:
    template = NOT_COVERED_ZH if chinese else NOT_COVERED
    return template.format(quote=closest.text, number=closest.number)


def not_covered_record(closest: Sentence) -> dict[str, Any]:
    return {
        "verdict": "not_covered",
        "quotes": {str(closest.number): [_quote_record(closest)]},
        "unsupported": [],
        "closest": {"number": closest.number, **_quote_record(closest)},
    }


def passage_map(passages: Sequence[Passage]) -> dict[int, tuple[str, str]]:
    """number -> (text, context) of the passages whose text is still there."""
    return {p.number: (p.chunk.text, context_of(p)) for p in passages if p.chunk is not None}


# --- a reply, checked -----------------------------------------------------------------------


@dataclass
class ReplyEvidence:
    suffix: str = ""  # appended to the reply as its last piece: citations, or the warning
    replacement: str | None = None  # documents only: what the reply is replaced by
    record: dict[str, Any] = field(default_factory=dict)  # stored with the reply


def _quote_record(sentence: Sentence) -> dict[str, Any]:
    return {"text": sentence.text, "start": sentence.start, "end": sentence.end}


def conversation_passages(question_message: Any, *, reader: Reader | None = None) -> list[Passage]:
    """The passages a reply to `question_message` may rest on: its own, and those the
    questions before it on its branch were given (a follow-up keeps its documents); each
    number once, the latest row for it. Only those `reader` (by default the conversation's
    owner, as they are now) may read: a passage of a document they lost access to is neither
    shown nor used as support."""
    if reader is None:
        reader = reader_for_session(question_message.session)
    ids = []
    message = question_message
    while message is not None:
        if message.role == "user":
            ids.append(message.id)
        message = message.parent
    rows = Passage.objects.filter(message_id__in=ids).select_related("chunk", "message", "document")
    by_number: dict[int, Passage] = {}
    for row in sorted(rows, key=lambda p: (p.message.created_at, p.message_id)):
        by_number[row.number] = row
    readable = services.readable_passages(list(by_number.values()), reader=reader)
    return sorted(readable, key=lambda p: p.number)


def earlier_questions(question_message: Any) -> list[str]:
    out = []
    message = question_message.parent
    while message is not None:
        if message.role == "user":
            out.append(message.content)
        message = message.parent
    return list(reversed(out))


def evaluate(
    *,
    reply: str,
    question: str,
    passages: Mapping[int, tuple[str, str]],
    subject: subjects.Subject,
    similarity: evidence.Similarity | None,
    replace: bool,
    asked_in_chinese: bool,
    asked: str | None = None,
) -> ReplyEvidence:
    """What a reply to `question` shows, given its conversation's passages (`asked`: the kind
    of figure the conversation asks for, `followups.kind_asked`)."""
    checked = evidence.check(
        reply,
        question,
        passages,
        subject,
        similarity=similarity,
        presence=presence(subject),
        # In a Chinese reply an English word is written to name something ("需要经过 Finance 审批").
        is_common=None if chinese(reply) else common_word,
        asked=asked,
    )
    record: dict[str, Any] = {
        "verdict": checked.verdict,
        "quotes": {
            str(n): [_quote_record(s) for s in sentences] for n, sentences in checked.quotes.items()
        },
        "unsupported": [c.text for c in checked.unsupported],
    }
    if checked.closest is not None:
        record["closest"] = {"number": checked.closest.number, **_quote_record(checked.closest)}
    own = cited_numbers(reply)
    nothing = checked.verdict == evidence.NOTHING_TO_CHECK
    if nothing and checked.absent and not citations.declines(reply):
        # Nothing to look up, but what it asks about is in no passage: whatever the reply says
        # of it (a CEO, a bonus month) does not come from the documents.
        record["verdict"] = evidence.UNSUPPORTED
        record["unsupported"] = checked.absent[:3]
        template = ABSENT_ZH if asked_in_chinese else ABSENT
        shown = ("、" if asked_in_chinese else ", ").join(checked.absent[:3])
        return ReplyEvidence(suffix=template.format(terms=shown), record=record)
    if nothing and checked.other_column is not None and not citations.declines(reply):
        # Its words are a table's, from another column than asked: L4's rule for an L3 file.
        record["verdict"] = evidence.UNSUPPORTED
        record["other_column"] = checked.other_column
        template = OTHER_COLUMN_ZH if asked_in_chinese else OTHER_COLUMN
        return ReplyEvidence(suffix=template.format(column=checked.other_column), record=record)
    # A reply whose only claims are names, all held ("read the IT Security Standard on the
    # Wiki"), gives no figure either: asked how long a course takes, it has not said. (A name no
    # sentence holds is warned about, or replaced, as any unsupported claim is, below.)
    names_only = checked.verdict == evidence.SUPPORTED and not any(
        c.kind == evidence.FIGURE for c in checked.supported
    )
    if (
        (nothing or names_only)
        and checked.asked is not None
        and not citations.declines(reply)
        and not asking.gives(checked.asked, reply, question)
        and not asking.answers_otherwise(reply)
    ):
        # It names no figure, and what it says gives no time (or amount) where one was asked
        # for: a restated question, "by the end of the leave year" for "31 March".
        record["verdict"] = evidence.UNSUPPORTED
        record["missing"] = checked.asked
        record["quotes"] = {}  # nothing it says answers the question: no passage is cited
        names = KINDS_ZH if asked_in_chinese else KINDS
        template = NO_ANSWER_ZH if asked_in_chinese else NO_ANSWER
        return ReplyEvidence(suffix=template.format(asked=names[checked.asked]), record=record)
    if checked.verdict == evidence.NOTHING_TO_CHECK:
        texts = {n: text for n, (text, _) in passages.items()}
        suffix = citations.citation_suffix(reply, question, texts)
        if suffix.strip().startswith("*"):
            record["verdict"] = "not_found"
            suffix = citations.NOT_FOUND_NOTE_ZH if asked_in_chinese else citations.NOT_FOUND_NOTE
        elif not suffix and not own and checked.echoed is not None:
            # A one-word answer ("Thursday") adds too little for the word count to cite it, but
            # a sentence about the question holds it: that sentence is what it rests on.
            suffix = f" [{checked.echoed.number}]"
            record["quotes"] = {str(checked.echoed.number): [_quote_record(checked.echoed)]}
        elif (
            (suffix or own)
            and checked.echoed is None
            and len(citations.added_words(reply, question)) >= OFF_SUBJECT_WORDS
            and not asking.answers_otherwise(_without_copied(reply, passages))
        ):
            # The passages hold its words, but no sentence about the question does: "until
            # Christmas Eve" from the holiday table, asked about core hours on a Wednesday.
            record["verdict"] = "not_found"
            suffix = OFF_SUBJECT_ZH if asked_in_chinese else OFF_SUBJECT
        else:
            numbers = cited_numbers(suffix)
            record["quotes"] = _word_quotes(reply, question, passages, numbers)
        return ReplyEvidence(suffix=suffix, record=record)
    if checked.verdict == evidence.UNSUPPORTED and replace and checked.closest is not None:
        template = REPLACED_ZH if asked_in_chinese else REPLACED
        record["verdict"] = "replaced"
        record["quotes"] = {str(checked.closest.number): [_quote_record(checked.closest)]}
        return ReplyEvidence(
            replacement=template.format(quote=checked.closest.text, number=checked.closest.number),
            record=record,
        )
    suffix = "".join(f"[{n}]" for n in checked.cited if n not in own)
    suffix = f" {suffix}" if suffix else ""
    unheld = [c for c in checked.unsupported if c.text not in checked.mismatched]
    if unheld:
        shown = ", ".join(c.text for c in unheld[:4])
        suffix += (WARNING_ZH if asked_in_chinese else WARNING).format(claims=shown)
    if checked.mismatched and checked.asked is not None:
        record["mismatched"] = dict(checked.mismatched)
        names = KINDS_ZH if asked_in_chinese else KINDS
        shown = ("，" if asked_in_chinese else ", ").join(
            f"{text}（{names[kind]}）" if asked_in_chinese else f"{text} ({names[kind]})"
            for text, kind in list(checked.mismatched.items())[:4]
        )
        template = MISMATCH_ZH if asked_in_chinese else MISMATCH
        suffix += template.format(asked=names[checked.asked], claims=shown)
    elif checked.mismatched and checked.measure is not None:
        # "PIN 码要设几位" answered "18层": a count in another measure word.
        record["mismatched"] = dict(checked.mismatched)
        shown = "、".join(f"{text}{m}" for text, m in list(checked.mismatched.items())[:4])
        template = MISMATCH_ZH if asked_in_chinese else MISMATCH
        asked = f"几{checked.measure}" if asked_in_chinese else f"a count in “{checked.measure}”"
        suffix += template.format(asked=asked, claims=shown)
    return ReplyEvidence(suffix=suffix, record=record)


def _without_copied(reply: str, passages: Mapping[int, tuple[str, str]]) -> str:
    """`reply` without the passages' sentences it reads out word for word: a negation in a
    sentence it copies ("…，不再发放餐补。", asked when business class is allowed) is the
    passage's, not the reply answering "no"."""
    for number, (text, context) in passages.items():
        for sentence in split_passage(number, text, context):
            if len(sentence.text) >= COPIED_CHARACTERS and sentence.text in reply:
                reply = reply.replace(sentence.text, " ")
    return reply


def _word_quotes(
    reply: str, question: str, passages: Mapping[int, tuple[str, str]], numbers: set[int]
) -> dict[str, list[dict[str, Any]]]:
    """For a reply with no figure or name, cited by its words: in each cited passage, the
    sentence holding most of the words the reply adds to its question."""
    added = citations.added_words(reply, question)
    out: dict[str, list[dict[str, Any]]] = {}
    for number in sorted(numbers):
        if number not in passages:
            continue
        text, context = passages[number]
        best, best_count = None, 0
        for sentence in split_passage(number, text, context):
            count = len(added & set(words(sentence.text)))
            if count > best_count:
                best, best_count = sentence, count
        if best is not None:
            out[str(number)] = [_quote_record(best)]
    return out


def reply_evidence(
    *, question_message_id: int, reply_text: str, chinese_notes: bool | None = None
) -> ReplyEvidence:
    """The support check of a reply to the question stored as `question_message_id`. Its
    notes are in Chinese when `chinese_notes` says so (the reply's language was named, e.g. by
    the person's instructions), else when the question is in Chinese."""
    from chat.models import Message

    question_message = (
        Message.objects.select_related("session__tenant", "session__api_key", "parent")
        .filter(id=question_message_id)
        .first()
    )
    if question_message is None:
        return ReplyEvidence()
    reader = reader_for_session(question_message.session)
    passages = conversation_passages(question_message, reader=reader)
    texts = passage_map(passages)
    if not texts:
        return ReplyEvidence()
    session = question_message.session
    earlier = earlier_questions(question_message)
    question = followups.standalone(question_message.content, earlier)
    subject = subject_of(
        tenant_id=session.tenant_id,
        session_id=session.id,
        question=question,
        inherited=followups.inherited(question_message.content, earlier),
        reader=reader,
    )
    replace = services.mode(tenant=session.tenant) == KnowledgeBase.Mode.ONLY
    checked = evaluate(
        reply=reply_text,
        question=question,
        passages=texts,
        subject=subject,
        similarity=similarity_to(question),
        replace=replace,
        asked_in_chinese=(
            chinese(question_message.content) if chinese_notes is None else chinese_notes
        ),
        asked=followups.kind_asked(question_message.content, earlier),
    )
    # Passages of earlier questions the reply rests on are listed under it too.
    own = {p.number for p in passages if p.message_id == question_message.id}
    quoted = {int(n) for n in checked.record.get("quotes", {})}
    checked.record["earlier"] = [
        _source(p) for p in passages if p.number in quoted and p.number not in own
    ]
    return checked


def _source(passage: Passage) -> dict[str, Any]:
    return {
        "number": passage.number,
        "title": passage.title,
        "where": passage.where,
        "passage_id": passage.chunk_id,
        "document_id": f"doc-{passage.document_id.hex}" if passage.document_id else None,
        "snippet": citations.snippet(passage.chunk.text) if passage.chunk is not None else None,
        "cited": False,
    }
