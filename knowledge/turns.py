"""What the chat and the REST API ask of company knowledge, in plain terms.

- `turn_passages`: the passages a new question is given (retrieval, selection within the
  token budget, numbering that continues the conversation's), or that the documents have
  nothing on it — and, in "documents only" mode, that it is to be declined without the model.
- `render_history`: the model's view of earlier user messages: each with the passages it
  introduced (the same text every turn, so the conversation's computed KV stays valid).
- `passages_save` and `sources_of`: what is stored with a question, and the sources shown
  under its replies.

Numbers are per conversation: [1]–[4] in the first question, [5] next; a passage retrieved
again later keeps its number and is not repeated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from knowledge import answerability, followups, prompt, requests, retrieval, services, support
from knowledge.access import PUBLIC, Reader
from knowledge.citations import snippet
from knowledge.models import Chunk, KnowledgeBase, Passage
from tenants.models import Tenant

# Older questions' passages beyond this many tokens are left out of the history (their
# numbers and titles stay): a long conversation still fits the model's window.
HISTORY_PASSAGE_TOKENS = 1800

NONE_FOUND = "none_found"
DOCUMENTS = "documents"
GENERAL = "general"  # a writing or general task: the documents were not searched


@dataclass(frozen=True)
class PassageDraft:
    number: int
    chunk: Chunk  # with its document
    introduced: bool
    score: float


@dataclass
class TurnPassages:
    passages: list[PassageDraft] = field(default_factory=list)  # by number
    none_found: bool = False
    decline: bool = False  # answered without the model (`answer`, or the documents-only decline)
    # Judged before generation: the passages found do not answer the question. It is answered
    # at once with what the documents come closest to saying (`answer`), and that is stored
    # with the reply as its evidence.
    answer: str | None = None
    evidence: dict[str, Any] | None = None
    signals: answerability.Signals | None = None
    general: bool = False  # a writing or general task (knowledge.requests): no passages

    @property
    def grounding(self) -> str:
        if self.general:
            return GENERAL
        return NONE_FOUND if self.none_found else DOCUMENTS

    @property
    def introduced(self) -> list[prompt.PassageText]:
        return [
            prompt.PassageText(p.number, p.chunk.document.title, p.chunk.where, p.chunk.text)
            for p in self.passages
            if p.introduced
        ]


def user_content(question: str, turn: TurnPassages) -> str:
    """The new question as the model reads it, with the passages it introduces."""
    return prompt.user_content(
        question, turn.introduced, none_found=turn.none_found, general=turn.general
    )


def declines(*, tenant: Tenant) -> bool:
    """Questions the documents do not answer are declined (documents-only mode)."""
    return services.mode(tenant=tenant) == KnowledgeBase.Mode.ONLY


def decline_text(*, tenant: Tenant) -> str:
    return (
        f"I could not find this in {tenant}'s documents, so I cannot answer it. Try other "
        "words, or ask the people who own the topic."
    )


def system_prompt(*, tenant: Tenant) -> str:
    return prompt.system_prompt(tenant_prompt=tenant.system_prompt, tenant_name=str(tenant))


def turn_passages(
    *,
    tenant: Tenant,
    session_id: object,
    question: str,
    earlier_questions: Sequence[str] = (),
    earlier_passages: Sequence[Passage] = (),
    token_budget: int | None = None,
    reader: Reader = PUBLIC,
) -> TurnPassages | None:
    """The passages for a new question, or None when knowledge does not apply here. A question
    the passages found do not answer (knowledge.answerability) is answered at once with the
    closest they come, without the model. Only documents `reader` may read are searched, and
    earlier passages of the conversation it may no longer read are left out."""
    if not services.searchable(tenant=tenant, session_id=session_id, reader=reader):
        return None
    earlier_passages = services.readable_passages(earlier_passages, reader=reader)
    if requests.is_task(question):
        return TurnPassages(general=True)
    asked = followups.standalone(question, earlier_questions)
    inherited = followups.inherited(question, earlier_questions)
    # Only a question that says it leans back is judged as its standalone form, and rests on
    # the conversation's passages: "Name one colour." after a hotel question is a new one.
    leans_back = bool(inherited) and followups.is_marked(question)
    found = retrieval.retrieve(
        tenant_id=tenant.pk,
        session_id=session_id,
        question=question,
        earlier=earlier_questions,
        standalone=asked,
        judge_standalone=leans_back,
        reader=reader,
    )
    kept = [p for p in earlier_passages if p.chunk_id is not None]
    if not found.answerable and kept and leans_back:
        # A follow-up that finds nothing new rests on what the conversation was given.
        return _judged(
            tenant, session_id, asked, [], kept, found.best_similarity, inherited, reader
        )
    if not found.answerable:
        declined = services.mode(tenant=tenant) == KnowledgeBase.Mode.ONLY
        return TurnPassages(none_found=True, decline=declined)
    known = {p.chunk_id: p.number for p in earlier_passages if p.chunk_id is not None}
    budget = int(settings.QASSIST_KNOWLEDGE_PASSAGE_TOKENS)
    if token_budget is not None:
        budget = max(0, min(budget, token_budget))
    chosen = _select(found.found, known, budget, found.crossed)
    if not chosen:
        declined = services.mode(tenant=tenant) == KnowledgeBase.Mode.ONLY
        return TurnPassages(none_found=True, decline=declined)
    number = max((p.number for p in earlier_passages), default=0)
    drafts = [
        PassageDraft(known[f.chunk.pk], f.chunk, False, f.similarity)
        for f in chosen
        if f.chunk.pk in known
    ]
    # New passages in a canonical order (document, then position in it): two questions that
    # retrieve the same passages lay them out alike, and share their computed prefix.
    new = sorted(
        (f for f in chosen if f.chunk.pk not in known),
        key=lambda f: (f.chunk.document.created_at, str(f.chunk.document_id), f.chunk.ordinal),
    )
    for item in new:
        number += 1
        drafts.append(PassageDraft(number, item.chunk, True, item.similarity))
    drafts.sort(key=lambda d: d.number)
    return _judged(
        tenant, session_id, asked, drafts, kept, found.best_similarity, inherited, reader
    )


def _judged(
    tenant: Tenant,
    session_id: object,
    asked: str,
    drafts: list[PassageDraft],
    kept: Sequence[Passage],
    retrieval_similarity: float,
    inherited: Sequence[str] = (),
    reader: Reader = PUBLIC,
) -> TurnPassages:
    """The turn's passages, with the answerability decision taken on them and on those the
    conversation holds already."""
    given = {d.number: (d.chunk.text, support.chunk_context(d.chunk)) for d in drafts}
    for passage in kept:
        if passage.chunk is not None:
            given.setdefault(passage.number, (passage.chunk.text, support.context_of(passage)))
    signals, closest = support.question_signals(
        tenant_id=tenant.pk,
        session_id=session_id,
        question=asked,
        passages=given,
        retrieval_similarity=retrieval_similarity,
        inherited=inherited,
        reader=reader,
    )
    turn = TurnPassages(passages=drafts, signals=signals)
    if answerability.answers(signals) or closest is None:
        return turn
    turn.decline = True
    turn.answer = support.not_covered_text(closest, chinese=support.chinese(asked))
    turn.evidence = support.not_covered_record(closest)
    if closest.number not in {d.number for d in drafts}:
        # The closest sentence is in a passage an earlier question was given: list it again.
        passage = next(p for p in kept if p.number == closest.number)
        assert passage.chunk is not None  # its text gave the closest sentence
        turn.passages = sorted(
            [*drafts, PassageDraft(passage.number, passage.chunk, False, passage.score)],
            key=lambda d: d.number,
        )
    return turn


def _select(
    found: Sequence[retrieval.Found],
    known: dict[int, int],
    budget: int,
    crossed: retrieval.Found | None = None,
) -> list[retrieval.Found]:
    """The best passages within the limit and the token budget, the other script's best one
    among them when it was offered."""
    limit = int(settings.QASSIST_KNOWLEDGE_PASSAGES)
    chosen: list[retrieval.Found] = []
    used = 0
    ranked = list(found)
    if crossed is not None:
        ranked = [f for f in ranked if f.chunk.pk != crossed.chunk.pk]
        ranked.insert(min(limit - 1, len(ranked)), crossed)  # the last slot, if not better
        position = next((i for i, f in enumerate(found) if f.chunk.pk == crossed.chunk.pk), None)
        if position is not None and position < limit - 1:
            ranked = list(found)  # it made the cut on its own
    for item in ranked:
        if len(chosen) >= limit:
            break
        cost = 0 if item.chunk.pk in known else item.chunk.tokens
        if used + cost > budget:
            continue
        chosen.append(item)
        used += cost
    return chosen


def passages_save(*, message_id: int, turn: TurnPassages) -> None:
    Passage.objects.bulk_create(
        Passage(
            message_id=message_id,
            number=p.number,
            introduced=p.introduced,
            chunk=p.chunk,
            document_id=p.chunk.document_id,
            title=p.chunk.document.title[:300],
            where=p.chunk.where[:300],
            score=p.score,
            audience=p.chunk.document.audience,
        )
        for p in turn.passages
    )


def branch_passages(
    message_ids: Iterable[int], *, reader: Reader = PUBLIC
) -> dict[int, list[Passage]]:
    """Each message's passages that `reader` may read (those it may not are left out)."""
    return services.passages_of(message_ids=message_ids, reader=reader)


def render_history(
    questions: Sequence[tuple[int, str, str]], passages: dict[int, list[Passage]]
) -> dict[int, str]:
    """The model's text of earlier user messages ((id, content, grounding), oldest first):
    each with the passages it introduced, the oldest ones' text left out beyond
    HISTORY_PASSAGE_TOKENS (a placeholder keeps their numbers and titles)."""
    out: dict[int, str] = {}
    budget = HISTORY_PASSAGE_TOKENS
    for message_id, content, grounding in reversed(questions):
        given = [p for p in passages.get(message_id, []) if p.introduced]
        cost = sum(p.chunk.tokens for p in given if p.chunk is not None)
        keep = cost <= budget
        budget -= cost if keep else 0
        texts = [
            prompt.PassageText(
                p.number,
                p.title,
                p.where,
                (p.chunk.text if p.chunk is not None else None) if keep else prompt.OMITTED,
            )
            for p in given
        ]
        out[message_id] = prompt.user_content(
            content, texts, none_found=grounding == NONE_FOUND, general=grounding == GENERAL
        )
    return out


def sources_of(
    passages: Sequence[Passage],
    *,
    reply_text: str = "",
    evidence: Mapping[str, Any] | None = None,
) -> list[dict[str, object]]:
    """The sources shown under a reply: every passage its question had, in number order,
    marked where the reply cites it, each with the sentences quoted from it (`evidence`, the
    reply's support check), and the earlier passages of the conversation it rests on."""
    evidence = evidence or {}
    sources: list[dict[str, object]] = [
        {
            "number": p.number,
            "title": p.title,
            "where": p.where,
            "passage_id": p.chunk_id,
            "document_id": f"doc-{p.document_id.hex}" if p.document_id else None,
            "snippet": snippet(p.chunk.text) if p.chunk is not None else None,
            "cited": False,
        }
        for p in sorted(passages, key=lambda p: p.number)
    ]
    return mark_cited(sources, reply_text, evidence)


def mark_cited(
    sources: Sequence[dict[str, object]],
    reply_text: str,
    evidence: Mapping[str, Any] | None = None,
) -> list[dict[str, object]]:
    """The sources with `cited` set from the reply's text (for a reply with an unsupported
    claim, only those with a quote), and `quotes` from its support check (the sentences of each
    passage that hold what the reply states), with the earlier
    passages of the conversation it rests on added in number order."""
    cited = prompt.cited_numbers(reply_text)
    evidence = evidence or {}
    quotes = evidence.get("quotes", {})
    if evidence.get("verdict") == "unsupported":
        # The model's own "[1]" after a claim no sentence about the question holds is no
        # citation: only passages with a quote holding what the reply states count as cited.
        cited = {n for n in cited if quotes.get(str(n))}
    have = {source["number"] for source in sources}
    earlier = [dict(s) for s in evidence.get("earlier", []) if s.get("number") not in have]
    if earlier:
        sources = sorted([*sources, *earlier], key=lambda s: int(str(s["number"])))
    return [
        {
            **source,
            "cited": source["number"] in cited,
            "quotes": list(quotes.get(str(source["number"]), source.get("quotes") or [])),
        }
        for source in sources
    ]
