"""Answer quality and trust of company knowledge, measured (issues #12, #28):

    python -m bench.rag_eval                                   # both models, the default embedder
    python -m bench.rag_eval --models qwen2.5-coder-0.5b --embedder use-multilingual-v3
    python -m bench.rag_eval --retrieval-only                  # no model: recall and leaks only
    python -m bench.rag_eval --models qwen2.5-coder-0.5b --split fresh   # the clean figures only
    python -m bench.rag_eval --models qwen2.5-coder-0.5b --no-precheck --yesno --fit
                                       # every question generated, the model's yes/no asked too:
                                       # the answerability curves, and the fusion fitted on the
                                       # tuning half

A fresh SQLite database in a temporary folder: tenants `acme` (Northwind Robotics' handbook,
bench/rag_eval/data/acme) and `globex` (a confidential memo), every document indexed through
the product's pipeline (knowledge.ingest, the real parsers and embedder). Then every question of
bench/rag_eval/data/questions.jsonl is asked as a chat turn (chat.services: the passages the
product would give, numbered, in its prompt layout, and its answerability decision; a follow-up
in its parent's conversation) and answered by the model through the engine as the product builds
it (its settings, without the wait bound; llama.cpp, greedy, 200 tokens), then checked as the
product checks it (knowledge.support: citations, quotes, the warning, the documents-only
replacement).

Every figure is reported for the tuning half, the held-out half and the fresh split apart (the
questions' `split`): thresholds and prompts are tuned on `tune` only; `fresh` was written after
the held-out half had been read, and is the clean result. Reported per model:
- retrieval recall@5 and recall given (the expected document among the passages given);
- accuracy: an expected fact in the reply as shown, over the answerable questions, declines
  counting as wrong; follow-ups apart;
- unanswerable answered unwarned: a question the documents do not answer whose reply is neither
  declined (before generation, by the model, or replaced) nor warned (the support check's
  warning or the not-found note) — the target is at most 10%;
- answerable wrongly declined or warned: a question the documents answer whose reply is declined,
  or correct and warned (a warning on a wrong answer is right); apart: declined, correct answers
  warned, and wrong answers (not declined) left unwarned;
- correct with a quote holding the fact: of the correct replies, those with a quoted sentence
  that holds an expected fact;
- cited but unquoted figures: replies shown with a citation and no warning that state a figure
  no quote holds (the target is 0);
- tasks grounded: writing and general tasks (tag `task`) given passages;
- leaks: a globex term in a reply or in a passage acme was given (must be 0);
- the checks' cost: the answerability signals before generation and the support check after
  it, per question, against the turn's whole time;
- with `--no-precheck`, the answerability curves: for each signal and the fused probability,
  the share of unanswerable questions declined against the share of answerable ones declined,
  as the threshold moves.
Prints markdown tables for docs/BENCHMARKS.md and writes the per-question details as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
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

from knowledge.citations import declines as says_not_covered

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_MODELS = "smollm2-135m,qwen2.5-coder-0.5b"
# The questions' splits, reported apart in this order: tune on `tune`; `held_out` was read while
# tuning the trust checks (issue #28), so `fresh`, written afterwards, gives the clean figures.
SPLITS = ("tune", "held_out", "fresh")
PAGE_CHARS = 3000  # a "page" of a format without pages, for the indexing throughput


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


@dataclass
class Result:
    id: str
    tenant: str
    language: str
    answerable: bool
    question: str
    split: str = "tune"
    task: bool = False  # a writing or general task: the documents are not what it asks about
    sources: list[str] = field(default_factory=list)  # file names of the passages given
    passages: list[dict[str, Any]] = field(default_factory=list)  # the conversation's, checked
    recall: bool = False  # the expected source among retrieval's best five
    given: bool = False  # the expected source among the passages the model read
    grounding: str = ""
    signals: dict[str, Any] = field(default_factory=dict)  # knowledge.answerability
    probability: float | None = None  # the fused probability that the passages answer it
    model_yes: float | None = None  # the model's P(yes) to "do the passages answer it?"
    declined_before: bool = False  # answered without the model: the documents don't cover it
    reply: str = ""  # as the model wrote it
    shown: str = ""  # as the reader sees it: with the citation or the warning, or replaced
    verdict: str = ""  # the support check's
    quotes: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    correct: bool = False
    declined: bool = False  # before generation, by the model itself, or replaced
    warned: bool = False  # the warning or the not-found note under a reply that stands
    quote_holds_fact: bool = False
    unquoted_figures: list[str] = field(default_factory=list)  # cited, unwarned, in no quote
    leaked: list[str] = field(default_factory=list)
    retrieval_ms: float = 0.0  # preparing the turn: retrieval and the answerability signals
    check_ms: float = 0.0  # the support check after the reply
    cites_source: bool = False  # a citation names the expected source
    # As the product judged replies before the support check (issue #28's "before"): declined
    # by the model, or the not-found note of knowledge.citations on the question's passages.
    declined_old: bool = False
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
        # Throughput, not interactivity: no speed floor holding prompts to small chunks beside
        # the streams, every prompt of a wave admitted at once (answers are the same: greedy).
        settings.QASSIST_MIN_STREAM_SPEED = 0
        settings.QASSIST_PREFILL_BACKLOG = 1_000_000
        self.engine = build_engine()
        self.runner = self.engine.runner
        if settings.QASSIST_PASSAGE_KV:
            self.precompute_passages()

    def precompute_passages(self) -> None:
        """Every passage of acme's handbook computed once before the questions, as an idle
        worker would have (QASSIST_PASSAGE_KV=1): the questions are asked as tenant `eval`, so
        the passages are kept under that name. Globex's few questions find theirs computed in
        place (one tenant's set at a time: a second set under the same name drops the first's)."""
        import dataclasses

        from knowledge.passage_kv import passage_source
        from tenants.models import Tenant

        acme = Tenant.objects.get(slug="acme")
        sets = [s for s in passage_source({}) if s.tenant == acme.slug]
        started = time.perf_counter()
        kept = self.engine.compute_passages([dataclasses.replace(s, tenant="eval") for s in sets])
        print(f"passages' KV computed once: {kept} kept in {time.perf_counter() - started:.0f} s",
              flush=True)  # fmt: skip

    # Questions asked at once: answers are the same whatever the number (greedy), but sixteen
    # long prompts in the pool at once cost each prompt token three to four times what a
    # few do (docs/BENCHMARKS.md, "Prompts beside fast streams"): waves keep the run short.
    wave = 4

    def answer_all(
        self, conversations: dict[str, list[Any]], reply_start: dict[str, str] | None = None
    ) -> dict[str, str]:
        """Each conversation's greedy reply (`reply_start`: a reply's unseen start, by key)."""
        import dataclasses

        from inference.types import Delta, Done, Failed, SamplingParams

        plain = SamplingParams(max_tokens=200, temperature=0.0)
        starts = reply_start or {}
        replies: dict[str, list[str]] = {key: [] for key in conversations}
        keys = list(conversations)
        for start in range(0, len(keys), self.wave):
            wave = keys[start : start + self.wave]
            for key in wave:
                params = dataclasses.replace(plain, reply_start=starts.get(key, ""))
                events = self.engine.add_request(key, conversations[key], params, tenant="eval")
                for event in events:
                    if isinstance(event, Failed):
                        raise SystemExit(f"{key}: {event.message}")
            open_requests = set(wave)
            while open_requests:
                for event in self.engine.step():
                    if isinstance(event, Delta):
                        replies[event.request_id].append(event.text)
                    elif isinstance(event, Done):
                        open_requests.discard(event.request_id)
                    elif isinstance(event, Failed):
                        raise SystemExit(f"{event.request_id}: {event.message}")
        return {key: "".join(parts) for key, parts in replies.items()}

    def first_token_logprobs(
        self, conversations: dict[str, list[Any]]
    ) -> dict[str, list[dict[str, Any]] | None]:
        """The first token's logprobs (with the 20 most likely) of each conversation's reply."""
        from inference.types import Delta, Done, Failed, SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=20)
        out: dict[str, list[dict[str, Any]] | None] = dict.fromkeys(conversations)
        for key, conversation in conversations.items():
            for event in self.engine.add_request(
                f"check-{key}", conversation, params, tenant="eval"
            ):
                if isinstance(event, Failed):
                    raise SystemExit(f"{key}: {event.message}")
        waiting = set(conversations)
        while waiting:
            for event in self.engine.step():
                key = event.request_id.removeprefix("check-")
                if isinstance(event, Delta) and event.logprobs and out.get(key) is None:
                    out[key] = event.logprobs
                elif isinstance(event, Done):
                    waiting.discard(key)
                elif isinstance(event, Failed):
                    raise SystemExit(f"{event.request_id}: {event.message}")
        return out

    def close(self) -> None:
        stats = self.engine.stats
        if stats.placed_tokens or stats.passage_tokens_computed:
            print(
                f"passage tokens: {stats.placed_tokens} placed from precomputed KV, "
                f"{stats.passage_tokens_computed} computed in place",
                flush=True,
            )
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


CHECK_QUESTION = (
    "Do the passages above say what the answer to my question is? Answer only yes or no."
)


def yes_probability(entries: list[dict[str, Any]] | None) -> float | None:
    """P(yes) among yes and no, from the first token's top logprobs."""
    if not entries:
        return None
    top = entries[0].get("top_logprobs") or []
    yes = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "yes")
    no = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "no")
    return yes / (yes + no) if yes + no > 0 else None


def ask_all(
    questions: list[dict[str, Any]],
    tenants: dict[str, Any],
    model: str | None,
    *,
    yesno: bool = False,
    replay: dict[str, dict[str, Any]] | None = None,
) -> list[Result]:
    """Every question as a chat turn; answered by `model` (None: retrieval only) and checked as
    the product checks replies."""
    from django.contrib.auth.models import User

    from chat.services.replies import reply_finish
    from chat.services.turns import turn_prepare_send, turn_start
    from inference.types import ChatMessage
    from knowledge import answerability, citations, support
    from knowledge.evidence import figures, heading_numbers, without_headings, without_marks
    from knowledge.models import Passage
    from knowledge.prompt import cited_numbers
    from tenants.models import Membership

    answerer = Answerer(model) if model and replay is None else None
    by_id = {q["id"]: q for q in questions}
    results: dict[str, Result] = {}
    sessions: dict[str, Any] = {}
    levels: list[list[dict[str, Any]]] = []
    depth: dict[str, int] = {}
    for q in questions:  # a follow-up after its parent: one level deeper
        parent = q.get("follow_up_of")
        depth[q["id"]] = depth[parent] + 1 if parent else 0
        while len(levels) <= depth[q["id"]]:
            levels.append([])
        levels[depth[q["id"]]].append(q)
    signals_ms: dict[str, float] = {}
    original_signals = support.question_signals

    def timed_signals(**kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_signals(**kwargs)
        finally:
            signals_ms["last"] = (time.perf_counter() - started) * 1000

    support.question_signals = timed_signals
    try:
        for depth_, level in enumerate(levels):
            print(
                f"  level {depth_}: {len(level)} questions ({time.strftime('%H:%M:%S')})",
                file=sys.stderr,
            )
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
                signals_ms.pop("last", None)
                plan = turn_prepare_send(
                    user=user, tenant=tenant, session_id=session_id, content=q["question"]
                )
                elapsed = (time.perf_counter() - started) * 1000
                turn = turn_start(plan=plan)
                sessions[q["id"]] = (turn.session.id, user)
                given = Passage.objects.filter(message=turn.user_message).select_related("document")
                files = [p.document.filename for p in given if p.document is not None]
                found = plan.passages.signals if plan.passages is not None else None
                result = Result(
                    id=q["id"],
                    tenant=q["tenant"],
                    language=q["language"],
                    answerable=bool(q["answerable"]),
                    question=q["question"],
                    split=q.get("split", "tune"),
                    task="task" in q.get("tags", []),
                    sources=files,
                    recall=bool(q.get("source")) and q["source"] in top_five(tenant, q, by_id),
                    given=bool(q.get("source")) and q["source"] in files,
                    grounding=turn.user_message.grounding,
                    signals=found.as_dict() if found is not None else {},
                    probability=answerability.probability(found) if found is not None else None,
                    retrieval_ms=elapsed,
                    tags=q.get("tags", []),
                )
                result.signals["ms"] = signals_ms.get("last", 0.0)
                passage_text = " ".join(m.content for m in turn.conversation if m.role == "user")
                result.leaked = [t for t in q.get("leak_terms", []) if t in passage_text]
                results[q["id"]] = result
                turns[q["id"]] = turn
                if plan.canned_answer is not None:
                    canned[q["id"]] = plan.canned_answer
                    result.declined_before = bool(plan.passages and plan.passages.answer)
            if replay is not None:
                # Replies of an earlier run (the same prompts): the checks tuned in seconds.
                replies = {k: replay[k]["reply"] for k in turns if k not in canned} | canned
                for key in turns:
                    if replay[key].get("model_yes") is not None:
                        results[key].model_yes = replay[key]["model_yes"]
                        results[key].signals["model_yes"] = replay[key]["model_yes"]
            elif answerer is not None:
                asked = {k: t.conversation for k, t in turns.items() if k not in canned}
                replies = {**answerer.answer_all(asked), **canned}
                if yesno:
                    checks = {
                        k: [*t.conversation, ChatMessage("user", CHECK_QUESTION)]
                        for k, t in turns.items()
                        if results[k].grounding == "documents"
                    }
                    for key, entries in answerer.first_token_logprobs(checks).items():
                        results[key].model_yes = yes_probability(entries)
                        results[key].signals["model_yes"] = results[key].model_yes
            else:
                replies = dict.fromkeys(turns, "")
            for key, turn in turns.items():
                q = by_id[key]
                result = results[key]
                result.reply = replies[key]
                evidence: dict[str, Any] | None = None
                shown = replies[key]
                if key not in canned and turn.sources:
                    started = time.perf_counter()
                    checked = support.reply_evidence(
                        question_message_id=turn.user_message.id, reply_text=replies[key]
                    )
                    result.check_ms = (time.perf_counter() - started) * 1000
                    evidence = checked.record
                    shown = checked.replacement if checked.replacement else shown + checked.suffix
                elif key in canned:
                    evidence = turn.reply.evidence or None
                reply_finish(
                    reply_id=turn.reply.id,
                    content=shown or "…",
                    finish_reason="stop",
                    evidence=evidence,
                )
                record = evidence or {}
                result.shown = shown
                result.verdict = record.get("verdict", "")
                result.quotes = [
                    quote["text"]
                    for quotes in record.get("quotes", {}).values()
                    for quote in quotes
                ]
                result.unsupported = list(record.get("unsupported", []))
                passages = support.conversation_passages(turn.user_message)
                result.passages = [
                    {
                        "number": p.number,
                        "file": p.document.filename if p.document is not None else None,
                        "context": support.context_of(p),
                        "text": p.chunk.text if p.chunk is not None else None,
                    }
                    for p in passages
                ]
                result.declined = (
                    result.declined_before
                    or result.verdict == "replaced"
                    or result.grounding == "none_found"
                    or says_not_covered(result.reply)
                )
                result.warned = not result.declined and result.verdict in (
                    "unsupported",
                    "not_found",
                )
                result.correct = (
                    result.answerable and not result.declined and has_fact(shown, q["expected"])
                )
                result.quote_holds_fact = result.correct and any(
                    has_fact(quote, q["expected"]) for quote in result.quotes
                )
                cited = cited_numbers(shown)
                if cited and not result.warned and not result.declined:
                    held = {key for quote in result.quotes for key, _ in figures(quote)}
                    known = held | {k for k, _ in figures(q["question"])} | set(map(str, cited))
                    # "一" alone is the article of Chinese phrasing (补一张, 第一条), not a
                    # figure: the support check does not count it a claim either.
                    # List numbering (1., 2.) and citation marks are not figures it states,
                    # nor are the numbers of the headings it says it read ("第4章第6节").
                    headed = heading_numbers({p["context"] for p in result.passages})
                    stated = without_headings(without_marks(result.reply), headed)
                    result.unquoted_figures = [
                        written
                        for key, written in figures(stated)
                        if key not in known and written != "一"
                    ]
                result.cites_source = any(
                    p.number in cited
                    and p.document is not None
                    and p.document.filename == q.get("source")
                    for p in passages
                )
                result.leaked += [t for t in q.get("leak_terms", []) if t in replies[key]]
                own = {
                    p.number: p.chunk.text
                    for p in passages
                    if p.chunk is not None and p.message_id == turn.user_message.id
                }
                old_note = bool(own) and citations.citation_suffix(
                    replies[key], q["question"], own
                ).strip().startswith("*")
                result.declined_old = (
                    result.grounding == "none_found" or says_not_covered(replies[key]) or old_note
                )
    finally:
        support.question_signals = original_signals
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


def kinds(results: list[Result]) -> tuple[list[Result], list[Result], list[Result]]:
    """The answerable questions, the unanswerable ones (leak probes aside), the tasks."""
    answerable = [r for r in results if r.answerable and not r.task]
    unanswerable = [r for r in results if not r.answerable and not r.task and "leak" not in r.tags]
    return answerable, unanswerable, [r for r in results if r.task]


def summary(results: list[Result], *, answered: bool) -> dict[str, str]:
    answerable, unanswerable, tasks = kinds(results)
    row = {
        "questions": str(len(results)),
        "recall@5": share([r.recall for r in answerable]),
        "recall given": share([r.given for r in answerable]),
        "leaks": str(sum(bool(r.leaked) for r in results)),
    }
    if answered:
        row["accuracy"] = share([r.correct for r in answerable])
        row["en / zh"] = (
            share([r.correct for r in answerable if r.language == "en"]).split(" ")[0]
            + " / "
            + share([r.correct for r in answerable if r.language == "zh"]).split(" ")[0]
        )
        row["follow-ups"] = share([r.correct for r in answerable if "follow-up" in r.tags])
        row["unanswerable answered unwarned"] = share(
            [not r.declined and not r.warned for r in unanswerable]
        )
        row["unanswerable answered unwarned, checks before #28"] = share(
            [not r.declined_old for r in unanswerable]
        )
        row["unanswerable declined before generation"] = share(
            [r.declined_before for r in unanswerable]
        )
        # A warning on a wrong answer is right: only declines and warnings on correct answers
        # are wrong (the "wrongly declined or warned").
        row["answerable wrongly declined or warned"] = share(
            [r.declined or (r.warned and r.correct) for r in answerable]
        )
        row["answerable declined"] = share([r.declined for r in answerable])
        row["correct answers warned"] = share([r.warned for r in answerable if r.correct])
        row["wrong answers unwarned"] = share(
            [not r.warned for r in answerable if not r.correct and not r.declined]
        )
        row["correct with a quote holding the fact"] = share(
            [r.quote_holds_fact for r in answerable if r.correct and not r.warned]
        )
        row["cited figures no quote holds"] = str(sum(bool(r.unquoted_figures) for r in results))
        row["tasks grounded"] = share([r.grounding == "documents" for r in tasks])
        checked = [r.check_ms for r in results if r.check_ms]
        signals = [float(r.signals.get("ms", 0.0)) for r in results if r.signals]
        row["checks ms p50 (before / after)"] = (
            f"{statistics.median(signals) if signals else 0:.0f} / "
            f"{statistics.median(checked) if checked else 0:.0f}"
        )
    row["prepare ms p50"] = f"{statistics.median(r.retrieval_ms for r in results):.0f}"
    return row


SIGNALS = ("probability", "coverage", "rarest_present", "similarity", "retrieval", "model_yes")


def value(result: Result, name: str) -> float | None:
    if name == "probability":
        return result.probability
    found = result.signals.get(name)
    return float(found) if found is not None else None


def curve(results: list[Result], name: str) -> list[tuple[float, float, float]]:
    """(threshold, unanswerable declined, answerable declined) as the signal's threshold
    moves: a question is declined when its signal is below the threshold (or it was given no
    passage)."""
    answerable, unanswerable, _ = kinds(results)
    points = sorted({v for r in answerable + unanswerable if (v := value(r, name)) is not None})
    cuts = [points[0] - 1e-9, *points, points[-1] + 1e-9] if points else []
    out = []
    for cut in cuts:

        def declined(r: Result, cut: float = cut) -> bool:
            v = value(r, name)
            return v is None or v < cut

        if not answerable or not unanswerable:
            continue
        out.append(
            (
                cut,
                sum(map(declined, unanswerable)) / len(unanswerable),
                sum(map(declined, answerable)) / len(answerable),
            )
        )
    return out


def curve_table(results: list[Result], names: tuple[str, ...] = SIGNALS) -> str:
    """Each signal's share of unanswerable questions declined at 0, 5, 10 and 20% of the
    answerable ones declined (the best threshold that stays within each)."""
    lines = [
        "| signal | unanswerable declined at ≤ 0% / 5% / 10% / 20% answerable declined | "
        "threshold at 10% |",
        "|---|---|---|",
    ]
    for name in names:
        points = curve(results, name)
        if not points:
            continue
        cells = []
        at_ten = "—"
        for budget in (0.0, 0.05, 0.10, 0.20):
            within = [p for p in points if p[2] <= budget + 1e-9]
            best = max(within, key=lambda p: (p[1], -p[2])) if within else None
            cells.append(f"{best[1]:.2f}" if best else "—")
            if budget == 0.10 and best:
                at_ten = f"{best[0]:.3f}"
        lines.append(f"| {name} | {' / '.join(cells)} | {at_ten} |")
    return "\n".join(lines)


def fit(results: list[Result], features: tuple[str, ...]) -> dict[str, float]:
    """Logistic regression of "the documents answer it" on `features`, by Newton's method with
    a little L2 (few questions): the weights of knowledge.answerability."""
    import numpy as np

    answerable, unanswerable, _ = kinds(results)
    rows = [r for r in answerable + unanswerable if r.signals]
    x = np.array([[1.0, *[value(r, f) or 0.0 for f in features]] for r in rows])
    y = np.array([1.0 if r.answerable else 0.0 for r in rows])
    w = np.zeros(x.shape[1])
    ridge = 0.1 * np.eye(x.shape[1])
    ridge[0, 0] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + ridge @ w
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + ridge
        w -= np.linalg.solve(hessian, gradient)
    return {"bias": float(w[0]), **{f: float(v) for f, v in zip(features, w[1:], strict=True)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--embedder", default="", help="QASSIST_EMBEDDING_MODEL for this run")
    parser.add_argument("--retrieval-only", action="store_true")
    parser.add_argument(
        "--min-score", type=float, default=None, help="QASSIST_KNOWLEDGE_MIN_SCORE for this run"
    )
    parser.add_argument("--scores", action="store_true", help="print the best similarities")
    parser.add_argument(
        "--no-precheck",
        action="store_true",
        help="never decline before generation (every question answered): the curves",
    )
    parser.add_argument("--yesno", action="store_true", help="ask the model's yes/no too")
    parser.add_argument(
        "--precheck", type=float, default=None, help="QASSIST_KNOWLEDGE_PRECHECK for this run"
    )
    parser.add_argument(
        "--fit", action="store_true", help="fit the answerability fusion on the tuning half"
    )
    parser.add_argument("--only", default="", help="ids of questions to ask (comma-separated)")
    parser.add_argument("--split", default=None, choices=SPLITS, help="only this split")
    parser.add_argument(
        "--replay",
        type=Path,
        default=None,
        help="take the replies (and yes/no) from an earlier run's details, not from the model: "
        "valid while retrieval and the prompts are unchanged",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/rag_eval.json"))
    args = parser.parse_args()
    if args.embedder:
        os.environ["QASSIST_EMBEDDING_MODEL"] = args.embedder
    with tempfile.TemporaryDirectory(prefix="qassist-rag-eval-") as tmp:
        setup_django(Path(tmp))
        from django.conf import settings

        from knowledge import answerability

        if args.min_score is not None:
            settings.QASSIST_KNOWLEDGE_MIN_SCORE = args.min_score
        if args.no_precheck:
            answerability.THRESHOLD = 0.0
        elif args.precheck is not None:
            answerability.THRESHOLD = args.precheck
        indexed = index_corpus()
        questions = load_questions()
        if args.split:
            questions = [q for q in questions if q.get("split", "tune") == args.split]
        if args.only:
            wanted = set(args.only.split(","))
            by_id = {q["id"]: q for q in questions}
            for key in list(wanted):  # a follow-up needs its parents
                while by_id[key].get("follow_up_of"):
                    key = by_id[key]["follow_up_of"]
                    wanted.add(key)
            questions = [q for q in questions if q["id"] in wanted]
        if args.scores:
            print_scores(questions, indexed["tenants"])
        print(
            f"indexed {indexed['documents']} documents ({indexed['pages']} pages, "
            f"{indexed['chunks']} passages, {indexed['bytes'] / 1024:.0f} KB) in "
            f"{indexed['seconds']:.1f} s: {indexed['pages'] / indexed['seconds']:.1f} pages/s, "
            f"{indexed['chunks'] / indexed['seconds']:.1f} passages/s "
            f"(embedder {settings.QASSIST_EMBEDDING_MODEL})",
            file=sys.stderr,
        )
        rows: dict[str, dict[str, str]] = {}
        details: dict[str, list[dict[str, Any]]] = {}
        curves: dict[str, str] = {}
        fitted: dict[str, dict[str, float]] = {}
        models = [None] if args.retrieval_only else args.models.split(",")
        for model in models:
            name = model or "retrieval only"
            print(f"asking {len(questions)} questions with {name}", file=sys.stderr)
            started = time.perf_counter()
            replay = None
            if args.replay is not None:
                earlier = json.loads(args.replay.read_text())["runs"]
                replay = {r["id"]: r for r in earlier.get(name) or next(iter(earlier.values()))}
            results = ask_all(questions, indexed["tenants"], model, yesno=args.yesno, replay=replay)
            print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
            for split in SPLITS:
                part = [r for r in results if r.split == split]
                if part:
                    rows[f"{name}, {split}"] = summary(part, answered=model is not None)
                    curves[f"{name}, {split}"] = curve_table(part)
            tune = [r for r in results if r.split == "tune"]
            if args.fit and tune:
                features = answerability.FEATURES + (("model_yes",) if args.yesno else ())
                fitted[name] = fit(tune, features)
                fitted[f"{name} (signals only)"] = fit(tune, answerability.FEATURES)
            details[name] = [r.__dict__ for r in results]
            from chat.models import ChatSession

            ChatSession.objects.all().delete()  # the next model starts with no conversation
        columns = list(next(iter(rows.values())))
        print(f"\nembedder: {settings.QASSIST_EMBEDDING_MODEL}\n")
        print("| model, half | " + " | ".join(columns) + " |")
        print("|---|" + "---|" * len(columns))
        for name, row in rows.items():
            print(f"| {name} | " + " | ".join(row.get(c, "—") for c in columns) + " |")
        if args.no_precheck:
            for name, table in curves.items():
                print(f"\nanswerability curves, {name}:\n\n{table}")
        for name, weights in fitted.items():
            print(f"\nfitted on the tuning half, {name}: {json.dumps(weights)}")
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
