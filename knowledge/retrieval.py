"""Hybrid retrieval: full text and vectors, fused by reciprocal rank, within a token budget.

For a follow-up ("And for tier-2 cities?") the question alone says too little, so the
conversation forms the query: the vectors are searched for the question and for the previous
question joined to it, the full text for the words of both, and the rankings are fused
(reciprocal rank fusion, k = 60: a passage ranked well by several searches beats one ranked
first by one). A multilingual embedding puts a question closer to passages of its own language,
so a Chinese question about an English policy found Chinese passages first: the best passage in
the other script is also looked up, and given a slot when it is nearly as close as the best one
(recall@5 of bench/rag_eval's Chinese questions 0.84 without, docs/BENCHMARKS.md). Whether the
documents answer at all is decided on the vector similarity of the best passage
(`QASSIST_KNOWLEDGE_MIN_SCORE`, calibrated on bench/rag_eval's questions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings

from knowledge import index, segment
from knowledge.access import PUBLIC, Reader
from knowledge.embeddings import get_embedder
from knowledge.models import Chunk

CANDIDATES = 20  # from each search, before fusion
RRF_K = 60
# The other script's best passage is given when its similarity is at least this share of the
# best one's (measured: the answers of cross-language questions came at 0.84-1.5 times).
CROSS_RATIO = 0.8


@dataclass(frozen=True)
class Found:
    chunk: Chunk  # with its document
    fused: float  # reciprocal-rank score
    similarity: float  # the best vector similarity it had in any search (0 if none)


@dataclass
class Retrieval:
    found: list[Found] = field(default_factory=list)  # fused order, best first
    best_similarity: float = 0.0
    # The best passage in the other script, when nearly as close as the best one: a slot of
    # the selection is kept for it.
    crossed: Found | None = None

    @property
    def answerable(self) -> bool:
        return bool(self.found) and self.best_similarity >= settings.QASSIST_KNOWLEDGE_MIN_SCORE


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion: each ranking adds 1 / (k + rank) to the ids it lists."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return scores


def retrieve(
    *,
    tenant_id: int,
    session_id: object,
    question: str,
    earlier: Sequence[str] = (),
    candidates: int = CANDIDATES,
    standalone: str | None = None,
    judge_standalone: bool = True,
    reader: Reader = PUBLIC,
) -> Retrieval:
    """Passages for `question` (with `earlier` questions of the conversation, oldest first)
    from the tenant's documents that `reader` may read and the conversation's attached ones;
    `standalone`: the question made standalone when it is a follow-up (knowledge.followups),
    searched too and, with `judge_standalone`, judged on as the question itself (a short
    question that does not say it leans back, "Name one colour.", is judged on its own words)."""
    embedder = get_embedder()
    queries = [question]
    judged = 1  # the queries whose best similarity says whether the documents answer
    if standalone and standalone != question:
        queries.append(standalone)
        judged = 2 if judge_standalone else 1
    previous = next((q for q in reversed(earlier) if q.strip()), "")
    if previous:
        queries.append(f"{previous}\n{question}")
    vectors = embedder.embed_queries(queries)
    rankings: list[list[int]] = []
    similarity: dict[int, float] = {}
    best = 0.0
    for i, vector in enumerate(vectors):
        hits = index.vector_search(
            tenant_id=tenant_id,
            session_id=session_id,
            vector=vector,
            embedder=embedder.name,
            limit=candidates,
            reader=reader,
        )
        rankings.append([h.chunk_id for h in hits])
        for hit in hits:
            similarity[hit.chunk_id] = max(similarity.get(hit.chunk_id, 0.0), hit.score)
        if i < judged and hits:
            # The question's own similarity (made standalone) decides whether the documents
            # answer it, not the joined query's; a follow-up about something the documents
            # lack is then caught by its subject (knowledge.answerability).
            best = max(best, hits[0].score)
    # The best passage written in the other script (a Chinese question, an English policy):
    # a multilingual embedding ranks it below passages that merely share the question's
    # language, so it is offered apart (`select`).
    other = index.vector_search(
        tenant_id=tenant_id, session_id=session_id, vector=vectors[0], embedder=embedder.name,
        limit=1, cjk=not segment.mostly_cjk(question), reader=reader,
    )  # fmt: skip
    words = segment.query_words(question)
    if previous:
        words += [w for w in segment.query_words(previous) if w not in words]
    text_hits = index.fulltext_search(
        tenant_id=tenant_id, session_id=session_id, words=words, limit=candidates, reader=reader
    )
    rankings.append([h.chunk_id for h in text_hits])
    scores = fuse(rankings)
    if not scores:
        return Retrieval()
    chunks = Chunk.objects.select_related("document").in_bulk(list(scores))
    found = [
        Found(chunks[chunk_id], score, similarity.get(chunk_id, 0.0))
        for chunk_id, score in sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        if chunk_id in chunks
    ]
    crossed = None
    if other and other[0].chunk_id in chunks and other[0].score >= CROSS_RATIO * best:
        crossed = Found(chunks[other[0].chunk_id], 0.0, other[0].score)
    elif other and other[0].score >= CROSS_RATIO * best:
        chunk = Chunk.objects.select_related("document").filter(pk=other[0].chunk_id).first()
        crossed = Found(chunk, 0.0, other[0].score) if chunk is not None else None
    return Retrieval(
        found=found, best_similarity=max(best, other[0].score if other else 0.0), crossed=crossed
    )


def select(found: Sequence[Found], *, limit: int, token_budget: int) -> list[Found]:
    """The best passages that fit: at most `limit`, within `token_budget` tokens."""
    chosen: list[Found] = []
    used = 0
    for item in found:
        if len(chosen) >= limit:
            break
        if used + item.chunk.tokens > token_budget:
            continue
        chosen.append(item)
        used += item.chunk.tokens
    return chosen
