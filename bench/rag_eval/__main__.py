"""Answer quality of company knowledge, measured (issue #12):

    python -m bench.rag_eval                                   # both models, the default embedder
    python -m bench.rag_eval --models qwen2.5-coder-0.5b --embedder use-multilingual-v3
    python -m bench.rag_eval --retrieval-only                  # no model: recall and leaks only

A fresh SQLite database in a temporary folder: tenants `acme` (Northwind Robotics' handbook,
bench/rag_eval/data/acme) and `globex` (a confidential memo), every document indexed through
the product's pipeline (knowledge.ingest, the real parsers and embedder). Then every question of
bench/rag_eval/data/questions.jsonl is asked as a chat turn (chat.services: the passages the
product would give, numbered, in its prompt layout; a follow-up in its parent's conversation)
and answered by the model through the engine as the product builds it (its settings, without
the wait bound; llama.cpp, greedy, 200 tokens).

Reported per model:
- retrieval recall@5: the expected document among the five best passages retrieval found;
- recall given: the expected document among the passages the question was given (the product
  gives `QASSIST_KNOWLEDGE_PASSAGES`, 3);
- answer accuracy: an expected fact in the reply (normalised: case, spaces, thousands
  separators, full-width forms), over the answerable questions;
- unanswerable declined: the documents were judged not to answer (no passage given) or the
  reply as the reader sees it says they do not cover it: the model said so itself, or the
  product's not-found note followed a reply that rests on no passage (knowledge.citations);
  both shares are reported, with the note's errors: correct answers noted, wrong ones not;
- correct, citing the source: of the correct replies, those whose citation (added by the
  product after the reply, knowledge.citations) names the expected document;
- leaks: a globex term in a reply or in a passage acme was given (must be 0);
- indexing throughput, and per-question retrieval time.
Prints a markdown table for docs/BENCHMARKS.md and writes the per-question details as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import unicodedata
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_MODELS = "smollm2-135m,qwen2.5-coder-0.5b"
PAGE_CHARS = 3000  # a "page" of a format without pages, for the indexing throughput
DECLINES = (
    "do not cover",
    "don't cover",
    "does not cover",
    "doesn't cover",
    "not covered",
    "no passage",
    "not mention",
    "does not say",
    "do not say",
    "could not find",
    "couldn't find",
    "cannot find",
    "can't find",
    "no information",
    "not in the documents",
    "not found",
    "没有涉及",
    "未涉及",
    "没有提到",
    "未提及",
    "没有找到",
    "未找到",
    "没有相关",
    "无法找到",
    "文档中没有",
    "没有说明",
)


def setup_django(var: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "qassist.settings"
    os.environ["QASSIST_VAR_DIR"] = str(var)
    os.environ["DATABASE_URL"] = f"sqlite:///{var / 'eval.sqlite3'}"
    os.environ.setdefault("QASSIST_PRELOAD_ENGINE", "0")
    os.environ["REDIS_URL"] = ""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import knowledge.tasks

    # Documents are indexed here, in this process, not by a Celery worker.
    knowledge.tasks.index_dispatch = lambda *, document_id, version: None


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    # Thousands separators: "1,200元" is 1200 (a Chinese character after the digits is no
    # word boundary, so the end of the group is "no further digit").
    text = re.sub(r"(?<=\d)[,\s](?=\d{3}(?!\d))", "", text)
    return re.sub(r"\s+", "", text)


def has_fact(reply: str, expected: list[str]) -> bool:
    flat = normalise(reply)
    return any(normalise(fact) in flat for fact in expected)


def says_not_covered(reply: str) -> bool:
    low = reply.lower()
    return any(phrase in low for phrase in DECLINES)


@dataclass
class Result:
    id: str
    tenant: str
    language: str
    answerable: bool
    question: str
    sources: list[str] = field(default_factory=list)  # file names of the passages given
    recall: bool = False  # the expected source among retrieval's best five
    given: bool = False  # the expected source among the passages the model read
    grounding: str = ""
    reply: str = ""
    correct: bool = False
    declined: bool = False
    leaked: list[str] = field(default_factory=list)
    retrieval_ms: float = 0.0
    citation: str = ""  # what the product appends to the reply: " [2]", or the not-found note
    noted: bool = False  # that is the not-found note (knowledge.citations.unsupported)
    cites_source: bool = False  # that citation names the expected source
    tags: list[str] = field(default_factory=list)


def load_questions() -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line
    ]


def index_corpus() -> dict[str, Any]:
    from knowledge import ingest, services
    from tenants.services import tenant_create

    tenants = {
        "acme": tenant_create(slug="acme", name="Northwind Robotics"),
        "globex": tenant_create(slug="globex", name="Globex"),
    }
    stats: dict[str, Any] = {"documents": 0, "pages": 0, "chunks": 0, "bytes": 0, "seconds": 0.0}
    for slug, tenant in tenants.items():
        for path in sorted((DATA / slug).iterdir()):
            data = path.read_bytes()
            document = services.document_upload(
                tenant=tenant, upload=services.Upload(path.name, data)
            )
            started = time.perf_counter()
            status = ingest.document_index(document_id=document.pk, version=document.version)
            stats["seconds"] += time.perf_counter() - started
            document.refresh_from_db()
            if status != "ready":
                raise SystemExit(f"{path.name} failed to index: {document.error}")
            text = sum(len(c.text) for c in document.chunks.all())
            stats["documents"] += 1
            stats["pages"] += document.pages or max(1, round(text / PAGE_CHARS))
            stats["chunks"] += document.chunk_count
            stats["bytes"] += len(data)
    return {"tenants": tenants, **stats}


class Answerer:
    """A model behind the product's engine, driven step by step in this process."""

    def __init__(self, model: str) -> None:
        from django.conf import settings

        from inference.service import build_engine, set_prompt_counter

        settings.QASSIST_MODEL = model
        set_prompt_counter(None)  # passages are budgeted in this model's tokens
        # The engine as the product builds it (sequences, step budget, speed floor, host
        # cache and parking), but every question is answered however long it waits.
        settings.QASSIST_MAX_WAIT_SECONDS = None
        settings.QASSIST_MAX_QUEUE = 256
        self.engine = build_engine()
        self.runner = self.engine.runner

    def answer_all(self, conversations: dict[str, list[Any]]) -> dict[str, str]:
        from inference.types import Delta, Done, Failed, SamplingParams

        params = SamplingParams(max_tokens=200, temperature=0.0)
        replies: dict[str, list[str]] = {key: [] for key in conversations}
        for key, conversation in conversations.items():
            for event in self.engine.add_request(key, conversation, params, tenant="eval"):
                if isinstance(event, Failed):
                    raise SystemExit(f"{key}: {event.message}")
        open_requests = set(conversations)
        while open_requests:
            for event in self.engine.step():
                if isinstance(event, Delta):
                    replies[event.request_id].append(event.text)
                elif isinstance(event, Done):
                    open_requests.discard(event.request_id)
                elif isinstance(event, Failed):
                    raise SystemExit(f"{event.request_id}: {event.message}")
        return {key: "".join(parts) for key, parts in replies.items()}

    def close(self) -> None:
        self.runner.close()


def top_five(tenant: Any, q: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """The files of retrieval's five best passages for the question (a follow-up with its
    parent's question, as the chat searches)."""
    from django.test import override_settings

    from knowledge import turns
    from knowledge.retrieval import retrieve

    earlier = [by_id[q["follow_up_of"]]["question"]] if q.get("follow_up_of") else []
    found = retrieve(tenant_id=tenant.pk, session_id=None, question=q["question"], earlier=earlier)
    # The product's selection (the other script's best passage given a slot), five of them.
    with override_settings(QASSIST_KNOWLEDGE_PASSAGES=5):
        chosen = turns._select(found.found, {}, 10**6, found.crossed)
    return [f.chunk.document.filename for f in chosen]


def ask_all(
    questions: list[dict[str, Any]], tenants: dict[str, Any], model: str | None
) -> list[Result]:
    """Every question as a chat turn; answered by `model` (None: retrieval only)."""
    from django.contrib.auth.models import User

    from chat import services
    from knowledge import turns as knowledge_turns
    from knowledge.models import Passage
    from knowledge.prompt import cited_numbers
    from tenants.models import Membership

    answerer = Answerer(model) if model else None
    by_id = {q["id"]: q for q in questions}
    results: dict[str, Result] = {}
    sessions: dict[str, Any] = {}
    levels = [
        [q for q in questions if not q.get("follow_up_of")],
        [q for q in questions if q.get("follow_up_of")],
    ]
    try:
        for level in levels:
            turns: dict[str, Any] = {}
            canned: dict[str, str] = {}
            for q in level:
                tenant = tenants[q["tenant"]]
                parent = q.get("follow_up_of")
                if parent:
                    session_id, user = sessions[parent]
                else:
                    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:10]}")
                    Membership.objects.create(user=user, tenant=tenant)
                    session_id = None
                started = time.perf_counter()
                plan = services.turn_prepare_send(
                    user=user, tenant=tenant, session_id=session_id, content=q["question"]
                )
                elapsed = (time.perf_counter() - started) * 1000
                turn = services.turn_start(plan=plan)
                sessions[q["id"]] = (turn.session.id, user)
                given = Passage.objects.filter(message=turn.user_message).select_related("document")
                files = [p.document.filename for p in given if p.document is not None]
                result = Result(
                    id=q["id"],
                    tenant=q["tenant"],
                    language=q["language"],
                    answerable=q["answerable"],
                    question=q["question"],
                    sources=files,
                    recall=bool(q.get("source")) and q["source"] in top_five(tenant, q, by_id),
                    given=bool(q.get("source")) and q["source"] in files,
                    grounding=turn.user_message.grounding,
                    retrieval_ms=elapsed,
                    tags=q.get("tags", []),
                )
                passage_text = " ".join(m.content for m in turn.conversation if m.role == "user")
                result.leaked = [t for t in q.get("leak_terms", []) if t in passage_text]
                results[q["id"]] = result
                turns[q["id"]] = turn
                if plan.canned_answer is not None:
                    canned[q["id"]] = plan.canned_answer
            if answerer is not None:
                asked = {k: t.conversation for k, t in turns.items() if k not in canned}
                replies = {**answerer.answer_all(asked), **canned}
            else:
                replies = dict.fromkeys(turns, "")
            for key, turn in turns.items():
                services.reply_finish(
                    reply_id=turn.reply.id, content=replies[key] or "…", finish_reason="stop"
                )
                q = next(x for x in level if x["id"] == key)
                result = results[key]
                result.reply = replies[key]
                result.correct = q["answerable"] and has_fact(replies[key], q["expected"])
                # The citation the product adds after the reply, and whether it names the
                # expected source.
                result.citation = knowledge_turns.reply_citation(
                    question_message_id=turn.user_message.id, reply_text=replies[key]
                )
                cited = cited_numbers(result.citation)
                result.cites_source = any(
                    p.number in cited
                    and p.document is not None
                    and p.document.filename == q.get("source")
                    for p in Passage.objects.filter(message=turn.user_message).select_related(
                        "document"
                    )
                )
                result.noted = result.citation.strip().startswith("*")
                # Declined as the reader sees it: the model said so, or the product's note did.
                result.declined = result.grounding == "none_found" or says_not_covered(
                    replies[key] + result.citation
                )
                result.leaked += [t for t in q.get("leak_terms", []) if t in replies[key]]
    finally:
        if answerer is not None:
            answerer.close()
    return [results[q["id"]] for q in questions]


def print_scores(questions: list[dict[str, Any]], tenants: dict[str, Any]) -> None:
    """The best passage's similarity per question, answerable or not: what the threshold
    QASSIST_KNOWLEDGE_MIN_SCORE is calibrated on."""
    from knowledge.retrieval import retrieve

    by_id = {q["id"]: q for q in questions}
    rows = []
    for q in questions:
        earlier = [by_id[q["follow_up_of"]]["question"]] if q.get("follow_up_of") else []
        found = retrieve(
            tenant_id=tenants[q["tenant"]].pk, session_id=None, question=q["question"],
            earlier=earlier,
        )  # fmt: skip
        kind = "answerable" if q["answerable"] else ("leak" if q.get("leak_terms") else "not")
        rows.append((found.best_similarity, kind, q["id"]))
    for score, kind, key in sorted(rows):
        print(f"{score:.3f} {kind:10} {key}", file=sys.stderr)


def share(values: list[bool]) -> str:
    return f"{sum(values) / len(values):.2f} ({sum(values)}/{len(values)})" if values else "—"


def summary(results: list[Result], *, answered: bool) -> dict[str, str]:
    answerable = [r for r in results if r.answerable]
    unanswerable = [r for r in results if not r.answerable and "leak" not in r.tags]
    row = {
        "recall@5": share([r.recall for r in answerable]),
        "recall@5 en": share([r.recall for r in answerable if r.language == "en"]),
        "recall@5 zh": share([r.recall for r in answerable if r.language == "zh"]),
        "recall given": share([r.given for r in answerable]),
        "unanswerable judged so": share([r.grounding == "none_found" for r in unanswerable]),
        "answerable judged unanswerable": share([r.grounding == "none_found" for r in answerable]),
        "leaks": str(sum(bool(r.leaked) for r in results)),
        "retrieval ms p50": f"{statistics.median(r.retrieval_ms for r in results):.0f}",
    }
    if answered:
        row["accuracy"] = share([r.correct for r in answerable])
        row["accuracy en"] = share([r.correct for r in answerable if r.language == "en"])
        row["accuracy zh"] = share([r.correct for r in answerable if r.language == "zh"])
        row["follow-ups"] = share([r.correct for r in answerable if "follow-up" in r.tags])
        row["correct, citing the source"] = share([r.cites_source for r in answerable if r.correct])
        row["unanswerable declined"] = share([r.declined for r in unanswerable])
        row["unanswerable declined by the model itself"] = share(
            [r.grounding == "none_found" or says_not_covered(r.reply) for r in unanswerable]
        )
        row["wrong answers noted not found"] = share([r.noted for r in answerable if not r.correct])
        row["correct answers noted not found"] = share([r.noted for r in answerable if r.correct])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--embedder", default="", help="QASSIST_EMBEDDING_MODEL for this run")
    parser.add_argument("--retrieval-only", action="store_true")
    parser.add_argument(
        "--min-score", type=float, default=None, help="QASSIST_KNOWLEDGE_MIN_SCORE for this run"
    )
    parser.add_argument("--scores", action="store_true", help="print the best similarities")
    parser.add_argument("--out", type=Path, default=Path("bench/results/rag_eval.json"))
    args = parser.parse_args()
    if args.embedder:
        os.environ["QASSIST_EMBEDDING_MODEL"] = args.embedder
    with tempfile.TemporaryDirectory(prefix="qassist-rag-eval-") as tmp:
        setup_django(Path(tmp))
        from django.conf import settings

        if args.min_score is not None:
            settings.QASSIST_KNOWLEDGE_MIN_SCORE = args.min_score
        indexed = index_corpus()
        if args.scores:
            print_scores(load_questions(), indexed["tenants"])
        print(
            f"indexed {indexed['documents']} documents ({indexed['pages']} pages, "
            f"{indexed['chunks']} passages, {indexed['bytes'] / 1024:.0f} KB) in "
            f"{indexed['seconds']:.1f} s: {indexed['pages'] / indexed['seconds']:.1f} pages/s, "
            f"{indexed['chunks'] / indexed['seconds']:.1f} passages/s "
            f"(embedder {settings.QASSIST_EMBEDDING_MODEL})",
            file=sys.stderr,
        )
        questions = load_questions()
        rows: dict[str, dict[str, str]] = {}
        details: dict[str, list[dict[str, Any]]] = {}
        models = [None] if args.retrieval_only else args.models.split(",")
        for model in models:
            name = model or "retrieval only"
            print(f"asking {len(questions)} questions with {name}", file=sys.stderr)
            started = time.perf_counter()
            results = ask_all(questions, indexed["tenants"], model)
            print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
            rows[name] = summary(results, answered=model is not None)
            details[name] = [r.__dict__ for r in results]
            from chat.models import ChatSession

            ChatSession.objects.all().delete()  # the next model starts with no conversation
        columns = list(next(iter(rows.values())))
        print(f"\nembedder: {settings.QASSIST_EMBEDDING_MODEL}\n")
        print("| model | " + " | ".join(columns) + " |")
        print("|---|" + "---|" * len(columns))
        for name, row in rows.items():
            print(f"| {name} | " + " | ".join(row[c] for c in columns) + " |")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"index": {k: v for k, v in indexed.items() if k != "tenants"}, "runs": details},
                ensure_ascii=False,
                indent=1,
            )
        )
        print(f"\ndetails: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
