"""How many employees one machine serves (issue #35): open-loop arrivals, as an operator sizes a
machine.

    python -m bench.capacity --mix knowledge --employees 20,40,60     # qassist, then llama-server
    python -m bench.capacity --mix chat --employees 40,80,120 --skip-server
    python -m bench.capacity --mix knowledge --employees 30 --env QASSIST_PASSAGE_KV=1 \\
        --workdir /var/tmp/capacity                                       # keep the index and KV
    python -m bench.capacity --plot results.json [more.json ...]          # docs/capacity.png

- **Employees** each ask one question every `--minutes-per-question` (3) minutes on average: the
  questions of E employees arrive as a Poisson process of rate E / 180 s, over REST
  (`/v1/chat/completions`, streaming, `max_tokens` 128, temperature 0), each employee with an
  API key of their own in one tenant whose system prompt is the 350-token company prompt of
  bench/prompts.py. A third of the questions are follow-ups in the asker's last conversation
  (sent when its previous reply has ended, if it has not yet); no two questions have the same
  text.
- **Knowledge mix**: the tenant's knowledge base is bench/corpus.py's Northwind handbook (320
  documents, 3,126 sections), indexed through the product's pipeline; questions are drawn with
  its Zipf skew (the hottest 10 % of topics get half of them) and checked for the figure the
  answer must name. **Chat mix**: general questions and follow-ups, no documents.
- Each level runs `--warmup` seconds of arrivals that are not counted, then `--window` seconds
  whose questions are measured to their end. Reported per level: questions offered and answered
  per minute, TTFT p50 / p95 / p99, the median stream speed, refusals, **goodput** (the share
  answered within `--slo-ttft` seconds to the first word and at `--slo-speed` tokens/s or more),
  the share of prompt tokens the worker did not compute (reused, restored, placed passage KV)
  and, of the passages' tokens, the share placed from precomputed KV; and how far the wait an
  employee was told (`: queued` comments) was from the wait that followed.
- **Employees served** is the largest level whose goodput is at least 0.95 (its p95 question
  meets the service level).
- **llama-server** (bench/build_llama_server.sh, the same llama.cpp) then gets the same
  arrivals with the exact prompts qassist's model read (the knowledge system prompt, the
  history as the employee sent it, the passages of each question rebuilt from the `sources`
  qassist returned), for each `--server-config` (`-np`, `--kv-unified` or not, `--cache-reuse`,
  `--cache-ram`). Questions qassist answered without the model (a cached reply, or a question
  its documents do not answer, `knowledge.answerability`) have no prompt: they are left out of
  the replay and counted apart.

Results are printed as a table and written as JSON (`--out`); `--plot` draws TTFT p95 and
goodput against employees for every system of the given JSON files into docs/capacity.png
(matplotlib, a bench-only dependency: `pip install matplotlib`, from PyPI).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.capacity_results import Level, headline, plot, summarize, table
from bench.company import Qassist, all_worker_stats, loadavg, summed
from bench.corpus import Question, QuestionDraw, build
from bench.prompts import COMPANY_SYSTEM_PROMPT
from bench.run import PYTHON, ROOT, free_port, process, wait_http

TENANT = "northwind"
TENANT_NAME = "Northwind Logistics"
COUNTERS = (
    "prefill_tokens", "cached_tokens", "reused_tokens", "restored_tokens", "placed_tokens",
    "passage_tokens_computed", "passages_computed", "warm_tokens", "generated_tokens", "steps",
)  # fmt: skip


# --- the workload ----------------------------------------------------------------------------

CHAT_TASKS = (
    "Write a short email to {who} about {what}.",
    "Explain {concept} in three sentences for a new colleague.",
    "Give me three tips for {activity}.",
    "Summarise the pros and cons of {choice}.",
    "Draft a two-line message to {who} asking about {what}.",
    "What is a good checklist for {activity}?",
    "How would you explain {concept} to a customer?",
    "Write a Python function that {code}.",
    "请用中文简要解释一下{concept_zh}。",
    "帮我写一封简短的邮件给{who_zh}，关于{what_zh}。",
)
CHAT_FILL = {
    "who": ("the shift lead", "our customs broker", "a new customer", "the finance team",
            "my manager", "the Rotterdam site", "a carrier", "the IT service desk"),
    "what": ("a delayed container", "next week's inventory count", "a damaged pallet",
             "the holiday roster", "a missing invoice", "a change of delivery address",
             "the quarterly review", "a forklift training date", "a late payment"),
    "concept": ("cross-docking", "incoterms", "first-in-first-out", "a bill of lading",
                "demurrage", "cycle counting", "a service level agreement", "route optimisation",
                "cold-chain monitoring", "safety stock"),
    "activity": ("onboarding a warehouse employee", "planning a peak season", "a site audit",
                 "reducing picking errors", "a customer call about a claim",
                 "packing fragile goods"),
    "choice": ("renting versus buying forklifts", "rail versus road freight",
               "one large warehouse versus three small ones", "manual versus automated picking"),
    "code": ("parses a CSV of shipments and sums weights per customer",
             "checks whether a container number has a valid check digit",
             "groups orders by delivery date", "finds duplicate invoice numbers"),
    "concept_zh": ("交叉转运", "国际贸易术语", "先进先出", "安全库存", "冷链监控"),
    "who_zh": ("仓库主管", "财务部", "新客户", "报关行"),
    "what_zh": ("集装箱延误", "下周盘点", "托盘破损", "发票缺失"),
}  # fmt: skip
CHAT_FOLLOW_UPS = (
    "Make it shorter, please", "Can you give a concrete example", "Turn that into a checklist",
    "What would you do first", "Say it more formally", "What are the common mistakes here",
    "请用中文再总结一下", "Add a subject line", "Explain the second point more",
)  # fmt: skip


class ChatDraw:
    """General questions, none asked twice: tasks filled with company-flavoured details."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._asked: set[str] = set()

    def first(self) -> Question:
        while True:
            task = self.rng.choice(CHAT_TASKS)
            fill = {k: self.rng.choice(v) for k, v in CHAT_FILL.items()}
            text = task.format(**fill)
            if self.rng.random() < 0.5:
                text = f"{text} It's for {self.rng.choice(CHAT_FILL['who'])}."
            if text not in self._asked:
                self._asked.add(text)
                return Question(-1, text, "", "en")

    def follow_up(self, previous: Question) -> Question:
        while True:
            ask = self.rng.choice(CHAT_FOLLOW_UPS)
            tail = self.rng.choice(("?", ", thanks.", ", please.", " for the team?", "?"))
            text = f"{ask}{tail} ({self.rng.randint(2, 9999)})"
            if text not in self._asked:
                self._asked.add(text)
                return Question(-1, text, "", previous.lang)


@dataclass
class Arrival:
    at: float  # seconds after the level started
    employee: int
    conversation: int  # index of the conversation this question belongs to
    question: Question
    measured: bool


def schedule(
    employees: int,
    seconds: float,
    warmup: float,
    draw: QuestionDraw | ChatDraw,
    *,
    seed: int,
    minutes_per_question: float = 3.0,
) -> list[Arrival]:
    """Poisson arrivals of rate employees / (minutes_per_question x 60 s); a third continue the
    asker's last conversation."""
    rng = random.Random(seed)
    rate = employees / (minutes_per_question * 60.0)
    out: list[Arrival] = []
    last: dict[int, tuple[int, Question]] = {}  # employee -> (conversation, last question)
    conversations = 0
    t = rng.expovariate(rate)
    while t < warmup + seconds:
        employee = rng.randrange(employees)
        if rng.random() < 1 / 3 and last:
            if employee not in last:
                employee = rng.choice(sorted(last))
            conversation, previous = last[employee]
            question = draw.follow_up(previous)
        else:
            conversation, conversations = conversations, conversations + 1
            question = draw.first()
        last[employee] = (conversation, question)
        out.append(Arrival(t, employee, conversation, question, t >= warmup))
        t += rng.expovariate(rate)
    return out


# --- one question, streamed ------------------------------------------------------------------


@dataclass
class Answer:
    arrival: Arrival
    sent: float = 0.0  # seconds after the level started
    ttft: float = 0.0
    duration: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0
    text: str = ""
    status: int = 0
    error: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    told: tuple[float, float] | None = None  # (seconds after sending, estimated wait)

    @property
    def ok(self) -> bool:
        return not self.error and self.status == 200

    @property
    def refused(self) -> bool:
        return self.status in (429, 503)

    @property
    def stream_tps(self) -> float:
        generating = self.duration - self.ttft
        return (self.tokens - 1) / generating if generating > 0 and self.tokens > 1 else 0.0

    def within(self, ttft: float, speed: float) -> bool:
        return self.ok and self.ttft <= ttft and (self.tokens <= 1 or self.stream_tps >= speed)


async def stream(
    client: httpx.AsyncClient, url: str, key: str, body: dict[str, Any], answer: Answer
) -> None:
    started = time.perf_counter()
    first = None
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with client.stream("POST", url, json=body, headers=headers) as response:
            answer.status = response.status_code
            if response.status_code != 200:
                answer.error = (await response.aread()).decode(errors="replace")[:300]
                return
            async for line in response.aiter_lines():
                if line.startswith(": queued ") and answer.told is None:
                    told = json.loads(line[len(": queued ") :]).get("estimated_wait")
                    if told is not None:
                        answer.told = (time.perf_counter() - started, float(told))
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("error"):
                    answer.error = json.dumps(chunk["error"])[:300]
                if chunk.get("usage"):
                    answer.tokens = int(chunk["usage"].get("completion_tokens") or 0)
                    answer.prompt_tokens = int(chunk["usage"].get("prompt_tokens") or 0)
                if chunk.get("sources"):
                    answer.sources = chunk["sources"]
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        first = first or time.perf_counter()
                        answer.text += piece
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        answer.error = f"{type(exc).__name__}: {exc}"
    finally:
        end = time.perf_counter()
        answer.ttft = (first or end) - started
        answer.duration = end - started


Messages = list[dict[str, str]]


async def run_level(
    url: str,
    keys: list[str],
    arrivals: list[Arrival],
    body_for: Callable[[Answer, Messages], dict[str, Any]],
    *,
    drain: float,
) -> list[Answer]:
    """Send each arrival at its time (a follow-up not before its conversation's previous reply
    ended), streaming; wait for all to end, at most `drain` seconds after the last arrival."""
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    answers = [Answer(a) for a in arrivals]
    histories: dict[int, Messages] = {}
    ended: dict[int, asyncio.Event] = {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=30), limits=limits) as client:
        t0 = time.perf_counter()

        async def one(answer: Answer, previous: asyncio.Event | None) -> None:
            a = answer.arrival
            await asyncio.sleep(max(0.0, a.at - (time.perf_counter() - t0)))
            if previous is not None:
                await previous.wait()
            history = histories.setdefault(a.conversation, [])
            answer.sent = time.perf_counter() - t0
            messages = [*history, {"role": "user", "content": a.question.text}]
            await stream(
                client, url, keys[a.employee % len(keys)], body_for(answer, messages), answer
            )
            history += [messages[-1], {"role": "assistant", "content": answer.text}]

        tasks = []
        for answer in answers:
            conversation = answer.arrival.conversation
            previous = ended.get(conversation)
            done = ended[conversation] = asyncio.Event()

            async def run(answer: Answer = answer, previous: asyncio.Event | None = previous,
                          done: asyncio.Event = done) -> None:  # fmt: skip
                try:
                    await one(answer, previous)
                finally:
                    done.set()

            tasks.append(asyncio.create_task(run()))
        if not tasks:  # a level too short to draw a question (few employees, a short window)
            return answers
        last = max((a.at for a in arrivals), default=0.0)
        _, pending = await asyncio.wait(tasks, timeout=last + drain)
        for task in pending:
            task.cancel()
        for answer in answers:
            if not answer.status and not answer.error:
                answer.error = "not answered before the run ended"
    return answers


# --- qassist ------------------------------------------------------------------------------------

SETUP_SCRIPT = """
import json, sys
from tenants.models import Tenant
from tenants.services import api_key_create
spec = json.loads(sys.stdin.read())
tenant, _ = Tenant.objects.get_or_create(slug=spec["slug"], defaults={"name": spec["name"]})
tenant.name = spec["name"]
tenant.system_prompt = spec["prompt"]
tenant.save()
keys = [api_key_create(tenant=tenant, name=f"employee {i}")[1] for i in range(spec["keys"])]
print(json.dumps({"keys": keys}))
"""

INDEX_SCRIPT = """
import json, sys, time
from pathlib import Path
from knowledge import ingest, services
from knowledge.models import Chunk
import knowledge.tasks
from tenants.models import Tenant
knowledge.tasks.index_dispatch = lambda *, document_id, version: None
spec = json.loads(sys.stdin.read())
tenant = Tenant.objects.get(slug=spec["slug"])
started = time.monotonic()
if not Chunk.objects.filter(tenant=tenant).exists():
    for name in sorted(Path(spec["folder"]).iterdir()):
        document = services.document_upload(
            tenant=tenant, upload=services.Upload(name.name, name.read_bytes())
        )
        status = ingest.document_index(document_id=document.pk, version=document.version)
        assert status == "ready", (name, status)
chunks = Chunk.objects.filter(tenant=tenant)
print(json.dumps({"documents": chunks.values("document").distinct().count(),
                  "passages": chunks.count(), "seconds": time.monotonic() - started,
                  "tokens": sum(chunks.values_list("tokens", flat=True))}))
"""

PROMPTS_SCRIPT = """
import json, sys
from knowledge import prompt, turns
from knowledge.models import Chunk
from tenants.models import Tenant
spec = json.loads(sys.stdin.read())
tenant = Tenant.objects.get(slug=spec["slug"])
chunks = {c.pk: (c.text, c.where) for c in Chunk.objects.filter(pk__in=spec["ids"])}
print(json.dumps({"system": turns.system_prompt(tenant=tenant),
                  "chunks": {str(k): v for k, v in chunks.items()}}, ensure_ascii=False))
"""


def manage_shell(env: dict[str, str], script: str, stdin: str) -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", script],
        input=stdin, env=env, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"manage.py shell failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def worker_counters(base: str) -> dict[str, Any]:
    return summed(all_worker_stats(base))


def wait_for_passages(base: str, timeout: float) -> dict[str, Any]:
    """Until the worker has computed every passage its index lists (none queued), or timeout."""
    started = time.monotonic()
    seen = -1
    while time.monotonic() - started < timeout:
        stats = worker_counters(base)
        queued, kept = stats.get("passages_queued", 0), stats.get("passages_kept", 0)
        if kept != seen:
            # Where the time goes: the engine's steps against the wall clock (the worker's loop,
            # Redis, the web process take the rest).
            print(
                f"  passages' KV: {kept} kept, {queued} queued; {stats.get('warm_tokens', 0)} "
                f"tokens in {stats.get('steps', 0)} steps, {stats.get('step_seconds', 0):.0f} s "
                f"stepping ({stats.get('decode_seconds', 0):.0f} s in llama_decode) of "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
            seen = kept
        if kept and not queued:
            break
        time.sleep(10)
    stats = worker_counters(base)
    stats["precompute_seconds"] = round(time.monotonic() - started, 1)
    return stats


def wait_idle(base: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = worker_counters(base)
        if not stats.get("running") and not stats.get("waiting"):
            return
        time.sleep(1)


def qassist_capacity(model: Path, args: argparse.Namespace) -> tuple[list[Level], dict[str, Any]]:
    """qassist at every level, and what the llama-server replay needs (prompts, arrivals)."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="qassist-capacity-"))
    workdir.mkdir(parents=True, exist_ok=True)
    q = Qassist(
        model,
        args,
        workdir,
        QASSIST_MAX_QUEUE=str(args.max_queue),
        QASSIST_API_KEY_MAX_STREAMS="1000",
        QASSIST_PASSAGE_KV_DISK_MB=str(args.passage_kv_disk_mb),
        **dict(item.split("=", 1) for item in args.env),
    )
    most = max(args.employees)
    keys = manage_shell(
        q.env,
        SETUP_SCRIPT,
        json.dumps(
            {"slug": TENANT, "name": TENANT_NAME, "prompt": COMPANY_SYSTEM_PROMPT, "keys": most}
        ),
    )["keys"]
    info: dict[str, Any] = {"arrivals": {}, "answers": {}}
    if args.mix == "knowledge":
        corpus = build()
        if args.corpus_limit:  # a small run while developing: the first documents only
            corpus.docs = corpus.docs[: args.corpus_limit]
        folder = workdir / "corpus"
        if not folder.exists():
            corpus.write(folder)
        indexed = manage_shell(
            q.env, INDEX_SCRIPT, json.dumps({"slug": TENANT, "folder": str(folder)})
        )
        print(
            f"corpus: {indexed['documents']} documents, {indexed['passages']} passages, "
            f"{indexed['tokens']} passage tokens (indexed in {indexed['seconds']:.0f} s)",
            flush=True,
        )
        info["corpus"] = indexed
    levels: list[Level] = []

    def scenario(q: Qassist, base: str, _ws: str) -> None:
        url = f"{base}/v1/chat/completions"
        model_id = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {keys[0]}"},
                             timeout=30).json()["data"][0]["id"]  # fmt: skip
        if args.mix == "knowledge" and "QASSIST_PASSAGE_KV=1" in args.env:
            info["precompute"] = wait_for_passages(base, args.precompute_timeout)

        def body(answer: Answer, messages: Messages) -> dict[str, Any]:
            return {
                "model": model_id, "messages": messages, "max_tokens": args.max_tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            }  # fmt: skip

        # A warm-up apart from the measured window: the model, the embedder, the first search.
        warm = [Arrival(0.0, 0, 0, Question(-1, "Hello! Who are you?", "", "en"), False)]
        asyncio.run(run_level(url, keys, warm, body, drain=120))
        for employees in args.employees:
            draw = make_draw(args, employees)
            arrivals = schedule(
                employees,
                args.window,
                args.warmup,
                draw,
                seed=args.seed + employees,
                minutes_per_question=args.minutes_per_question,
            )
            wait_idle(base)
            before = worker_counters(base)
            answers = asyncio.run(run_level(url, keys, arrivals, body, drain=args.drain))
            after = worker_counters(base)
            worker = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
            level = summarize(
                args.label or "qassist", args.mix, employees, args.window, answers, args, worker
            )
            levels.append(level)
            print(table([level]).splitlines()[-1], flush=True)
            info["arrivals"][employees] = arrivals
            info["answers"][employees] = answers

    q.run(scenario)
    if args.mix == "knowledge":
        ids = sorted({s["passage_id"] for ans in info["answers"].values() for a in ans
                      for s in a.sources if s.get("passage_id")})  # fmt: skip
        info["prompts"] = manage_shell(
            q.env, PROMPTS_SCRIPT, json.dumps({"slug": TENANT, "ids": ids})
        )
    return levels, info


def chat_arrivals(args: argparse.Namespace) -> dict[str, Any]:
    """The chat mix's arrivals at every level without running qassist (`--skip-qassist`): the
    same as qassist's run would get (seeded), each one to replay, since a chat question's prompt
    does not depend on what qassist answered."""
    if args.mix != "chat":
        raise SystemExit("--skip-qassist: only the chat mix (a knowledge prompt needs qassist's "
                         "passages)")  # fmt: skip
    arrivals, answers = {}, {}
    for employees in args.employees:
        arrivals[employees] = schedule(
            employees, args.window, args.warmup, make_draw(args, employees),
            seed=args.seed + employees, minutes_per_question=args.minutes_per_question,
        )  # fmt: skip
        answers[employees] = [Answer(a, status=200, prompt_tokens=1) for a in arrivals[employees]]
    return {"arrivals": arrivals, "answers": answers}


def make_draw(args: argparse.Namespace, employees: int) -> QuestionDraw | ChatDraw:
    if args.mix == "knowledge":
        corpus = build()
        if args.corpus_limit:
            corpus.docs = corpus.docs[: args.corpus_limit]
            corpus.topics = [t for t in corpus.topics if t.doc < args.corpus_limit]
        return QuestionDraw(corpus, seed=args.seed + employees)
    return ChatDraw(args.seed + employees)


# --- llama-server, given the same arrivals and the prompts qassist's model read ----------------


def replayed(answer: Answer, messages: Messages, info: dict[str, Any]) -> Messages:
    """The conversation as qassist's model read it: its system prompt (with the knowledge
    instructions), the history as the employee sent it, and the last question with the
    passages qassist gave it (rebuilt from the `sources` it returned)."""
    from knowledge import prompt

    if "prompts" not in info:
        return [{"role": "system", "content": COMPANY_SYSTEM_PROMPT}, *messages]
    chunks = info["prompts"]["chunks"]
    given = [
        prompt.PassageText(s["number"], s["title"], s.get("where") or "",
                           chunks.get(str(s.get("passage_id")), [None])[0])
        for s in answer.sources
    ]  # fmt: skip
    last = messages[-1]["content"]
    content = prompt.user_content(last, given, none_found=not given)
    return [
        {"role": "system", "content": info["prompts"]["system"]},
        *messages[:-1],
        {"role": "user", "content": content},
    ]


def replayable(arrivals: list[Arrival], qassist_answers: dict[int, Answer]) -> list[Arrival]:
    """The arrivals llama-server is given: every one qassist's model read. A question qassist
    answered without the model (a cached reply, a question judged unanswerable) has no prompt
    and is left out; one qassist did not finish (overload, a timeout) is replayed all the same,
    with the passages it was given if it said, or none: leaving it out would spare llama-server
    the very load qassist failed under."""
    without_model = {key for key, a in qassist_answers.items() if a.ok and not a.prompt_tokens}
    return [a for a in arrivals if id(a) not in without_model]


def server_capacity(
    binary: Path, model: Path, args: argparse.Namespace, info: dict[str, Any], config: str
) -> list[Level]:
    """llama-server with `config` (its flags after -np N: e.g. "-np 32 --kv-unified
    --cache-reuse 256") at every level, the same arrivals, the prompts qassist's model read."""
    port = free_port()
    flags = config.split()
    slots = int(flags[flags.index("-np") + 1]) if "-np" in flags else 16
    cmd = [
        str(binary), "-m", str(model), "--port", str(port), "--host", "127.0.0.1",
        "-c", str(slots * args.server_ctx_per_slot), "-t", str(args.threads),
        "-tb", str(args.threads), "--no-webui", *flags,
    ]  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    log = args.logs / f"llama-server-{config.replace(' ', '_')}.log"
    levels = []
    with process(cmd, env, log) as server:
        wait_http(f"http://127.0.0.1:{port}/health", 180, server, log)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        # At its best: every slot holds the system prompt before the first level, as it would
        # after a while in service (llama-server shares no prefix between slots, so each slot
        # would otherwise compute it on its first question, inside the measured window).
        started = time.monotonic()
        hello = Question(-1, "Hello! Who are you?", "", "en")
        for slot in range(slots):

            def warm_slot(_: Answer, m: Messages, slot: int = slot) -> dict[str, Any]:
                return {**body_of_warm(m, args), "id_slot": slot}

            asyncio.run(
                run_level(url, [""], [Arrival(0.0, slot, slot, hello, False)], warm_slot, drain=120)
            )
        print(f"  {slots} slots given the system prompt in {time.monotonic() - started:.0f} s",
              flush=True)  # fmt: skip
        for employees in args.server_employees or args.employees:
            qassist_answers = {id(a.arrival): a for a in info["answers"][employees]}
            arrivals = replayable(info["arrivals"][employees], qassist_answers)

            def body(
                answer: Answer,
                messages: Messages,
                qassist_answers: dict[int, Answer] = qassist_answers,
            ) -> dict[str, Any]:
                original = qassist_answers[id(answer.arrival)]
                return {
                    "messages": replayed(original, messages, info), "max_tokens": args.max_tokens,
                    "temperature": 0, "stream": True, "cache_prompt": True,
                    "stream_options": {"include_usage": True},
                }  # fmt: skip

            warm = [Arrival(0.0, 0, 0, Question(-1, "Hello! Who are you?", "", "en"), False)]
            asyncio.run(
                run_level(url, [""], warm, lambda a, m: {**body_of_warm(m, args)}, drain=120)
            )
            answers = asyncio.run(run_level(url, [""], arrivals, body, drain=args.drain))
            level = summarize(
                f"llama-server {config}", args.mix, employees, args.window, answers, args
            )
            levels.append(level)
            print(table([level]).splitlines()[-1], flush=True)
    return levels


def body_of_warm(messages: Messages, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": COMPANY_SYSTEM_PROMPT}, *messages],
        "max_tokens": 8, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    from inference import modelstore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", choices=["knowledge", "chat"], default="knowledge")
    parser.add_argument("--employees", default="20,40,60")
    parser.add_argument("--minutes-per-question", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=300.0, help="measured seconds per level")
    parser.add_argument("--warmup", type=float, default=60.0, help="unmeasured seconds first")
    parser.add_argument("--drain", type=float, default=300.0, help="seconds to finish after")
    parser.add_argument("--slo-ttft", type=float, default=3.0)
    parser.add_argument("--slo-speed", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=48)
    parser.add_argument("--context-size", type=int, default=65536)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument("--min-stream-speed", type=float, default=5.0)
    parser.add_argument("--max-wait", type=float, default=90.0)
    parser.add_argument("--max-queue", type=int, default=256)
    parser.add_argument("--host-cache-mb", type=int, default=1024)
    parser.add_argument("--passage-kv-disk-mb", type=int, default=16384)
    parser.add_argument("--precompute-timeout", type=float, default=7200.0)
    parser.add_argument("--corpus-limit", type=int, default=0, help="only the first N documents")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for qassist's processes, e.g. QASSIST_PASSAGE_KV=1",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep the database, index and passage KV here between runs",
    )
    parser.add_argument(
        "--label", default="",
        help='qassist\'s name in the table and the plot ("qassist 1.5B, a stream per sequence")',
    )  # fmt: skip
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument(
        "--skip-qassist", action="store_true",
        help="chat mix: llama-server only, on the arrivals qassist's run gets (same seed)",
    )  # fmt: skip
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument(
        "--server-config", action="append", default=[],
        help='llama-server flags, repeatable: "-np 32 --no-kv-unified --cache-reuse 256" '
        "(default: that one and -np 32 --kv-unified --cache-reuse 256)",
    )  # fmt: skip
    parser.add_argument("--server-ctx-per-slot", type=int, default=4096)
    parser.add_argument(
        "--server-employees", default="",
        help="llama-server at these levels only (some of --employees; default: all of them)",
    )  # fmt: skip
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    )
    parser.add_argument(
        "--logs", type=Path, default=Path(tempfile.mkdtemp(prefix="capacity-logs-"))
    )
    parser.add_argument("--out", type=Path, default=None, help="write the levels as JSON")
    parser.add_argument("--plot", type=Path, nargs="*", default=None,
                        help="draw docs/capacity.png from these JSON results and stop")  # fmt: skip
    args = parser.parse_args()
    if args.plot is not None:
        plot(args.plot, ROOT / "docs" / "capacity.png")
        return
    args.employees = [int(e) for e in args.employees.split(",")]
    args.server_employees = [int(e) for e in args.server_employees.split(",") if e]
    if not set(args.server_employees) <= set(args.employees):
        parser.error("--server-employees must be levels of --employees (their arrivals)")
    model = modelstore.resolve_model_path(args.model, ROOT / "models")
    print(f"model {model.name}; logs in {args.logs}; load {loadavg()}", flush=True)
    levels: list[Level] = []
    if args.skip_qassist:
        info = chat_arrivals(args)
    else:
        levels, info = qassist_capacity(model, args)
    if not args.skip_server:
        binary = args.llama_server or Path(
            subprocess.run(["bash", str(ROOT / "bench" / "build_llama_server.sh")],
                           capture_output=True, text=True, check=True).stdout.strip()
        )  # fmt: skip
        configs = args.server_config or [
            "-np 32 --no-kv-unified --cache-reuse 256",
            "-np 32 --kv-unified --cache-reuse 256",
        ]
        for config in configs:
            levels += server_capacity(binary, model, args, info, config)
    print(table(levels))
    print(headline(levels))
    if "precompute" in info:
        p = info["precompute"]
        print(f"passages' KV computed once: {p.get('passages_kept')} passages in "
              f"{p['precompute_seconds']} s ({p.get('warm_tokens')} tokens)")  # fmt: skip
    if args.out:
        result = {
            "levels": [asdict(v) for v in levels],
            "corpus": info.get("corpus"),
            "precompute": info.get("precompute"),
        }
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
