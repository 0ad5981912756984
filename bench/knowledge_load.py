"""Company knowledge under load (issue #12 §4): many employees asking about one handbook.

    python -m bench.knowledge_load --users 16,32
    python -m bench.knowledge_load --users 16 --skip-server      # qassist only

One tenant (Northwind Robotics, the ~350-token company system prompt of bench/company.py)
holds bench/rag_eval/data/acme, indexed through the product's pipeline (knowledge.ingest, the
default embedder). U employees, one account each, each ask `--turns` questions over the chat's
websocket with a think time of 0.5-2 s between a reply and the next question. Their questions
come from TOPICS below: eight topics of the handbook, each asked in four wordings (English and
Chinese), so several people ask about the same thing in different words, as they do; user u
starts on topic u % 8 in wording (u // 8) % 4 and moves on to other topics.

qassist answers with retrieval: each question's passages go into its prompt (docs/knowledge.md).
Then llama.cpp's `llama-server` (`-np` matched to the users, `--kv-unified`, its prompt cache
on) is given **exactly the same prompts**: the system prompt with the knowledge instructions
and, per turn, the user message with the passages qassist gave that turn (read back from
qassist's database and rendered by the product's own function), each conversation carrying
its own earlier replies, as an OpenAI client would send them. Same think times, same
`max_tokens`, temperature 0.

Reported: tokens/s, time to first token p50/p95 (from the client: for qassist this includes
the retrieval), per-turn TTFT, retrieval share, and from qassist's worker the prompt tokens it
computed against those it reused (a prefix copied from another sequence or restored from host
memory) with the passage tokens the prompts carried.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.company import (
    Qassist,
    Run,
    Turn,
    http_conversation,
    make_accounts,
    print_run,
    run_users,
    ws_conversation,
)
from bench.prompts import COMPANY_SYSTEM_PROMPT
from bench.run import PYTHON, ROOT, free_port, process, wait_http

HANDBOOK = ROOT / "bench" / "rag_eval" / "data" / "acme"

# Eight topics of the handbook, four wordings each.
TOPICS: list[list[str]] = [
    [
        "What is the most I can pay per night for a hotel in London?",
        "What's the hotel limit per night when I travel to London?",
        "How expensive may my London hotel be per night?",
        "在伦敦出差，酒店每晚最多可以报销多少？",
    ],
    [
        "How many days a week am I allowed to work from home?",
        "How many remote days per week does the policy allow?",
        "Can I work from home every day, or how many days a week?",
        "每周最多可以居家办公几天？",
    ],
    [
        "What is the hostname of the company VPN?",
        "Which server do I connect to for the VPN?",
        "What address do I put into FortiClient for the VPN?",
        "公司 VPN 的服务器地址是什么？",
    ],
    [
        "How many vacation days does someone who joined a year ago get?",
        "How much annual leave do I get after one year at the company?",
        "What is the holiday entitlement in the second year of service?",
        "入职一年后每年有多少天年假？",
    ],
    [
        "I clicked a link in a phishing email. How soon do I have to tell someone?",
        "How quickly must I report a security incident?",
        "Who do I call after opening a suspicious attachment, and how fast?",
        "点了钓鱼邮件里的链接，要多快报告？",
    ],
    [
        "Where do I collect my laptop on my first day?",
        "On my first day in Munich, where do I get my laptop?",
        "Who hands out the laptop to new employees on day one?",
        "入职第一天在哪里领取笔记本电脑？",
    ],
    [
        "If I drive my own car to a customer, how much do I get back per kilometre?",
        "What is the mileage rate for using my private car on business?",
        "How much is reimbursed per km when I take my own car?",
        "开私家车去见客户，每公里报销多少？",
    ],
    [
        "每个工作日的餐补是多少钱？",
        "How much is the meal allowance per working day in China?",
        "What do employees in Shanghai get as a daily meal subsidy?",
        "上海员工每天的餐饮补贴是多少？",
    ],
]


def conversation_of(user: int, turns: int) -> list[str]:
    """User u's questions: its own topic first, then others, each in a wording of its own."""
    rng = random.Random(7000 + user)
    first = user % len(TOPICS)
    others = rng.sample([t for t in range(len(TOPICS)) if t != first], turns - 1)
    wording = (user // len(TOPICS)) % 4
    return [TOPICS[t][(wording + i) % 4] for i, t in enumerate([first, *others])]


# --- qassist ----------------------------------------------------------------------------------

INDEX_SCRIPT = """
import json, sys
from pathlib import Path
from knowledge import ingest, services
import knowledge.tasks
from tenants.models import Tenant
knowledge.tasks.index_dispatch = lambda *, document_id, version: None
spec = json.loads(sys.stdin.read())
tenant = Tenant.objects.get(slug=spec["tenant"])
tenant.name = "Northwind Robotics"
tenant.save()
passages = 0
for name in sorted(Path(spec["folder"]).iterdir()):
    document = services.document_upload(
        tenant=tenant, upload=services.Upload(name.name, name.read_bytes())
    )
    status = ingest.document_index(document_id=document.pk, version=document.version)
    document.refresh_from_db()
    assert status == "ready", (name, document.error)
    passages += document.chunk_count
print(json.dumps({"passages": passages}))
"""

# Each conversation's prompts as the model read them, turn by turn: the system prompt with
# the knowledge instructions, and each user message with the passages it introduced.
PROMPTS_SCRIPT = """
import json
from chat.models import ChatSession, Message
from knowledge import turns
from knowledge.models import Chunk, Passage
from tenants.models import Tenant
tenant = Tenant.objects.get(slug="acme")
system = turns.system_prompt(tenant=tenant)
out = {"system": system, "users": {}, "passage_tokens": 0}
for session in ChatSession.objects.filter(tenant=tenant).select_related("user"):
    user = int(session.user.username.rsplit("-", 1)[1])
    questions = list(
        Message.objects.filter(session=session, role="user")
        .order_by("created_at", "id")
        .values_list("id", "content", "grounding")
    )
    passages = turns.branch_passages(m[0] for m in questions)
    out["passage_tokens"] += sum(
        p.chunk.tokens for ps in passages.values() for p in ps if p.introduced and p.chunk
    )
    rendered = []
    for k in range(len(questions)):
        rendered.append(turns.render_history(questions[: k + 1], passages)[questions[k][0]])
    out["users"][user] = rendered
print(json.dumps(out, ensure_ascii=False))
"""


def manage_shell(env: dict[str, str], script: str, stdin: str = "") -> dict[str, Any]:
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", script],
        input=stdin,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py shell failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def qassist_knowledge(
    model: Path, args: argparse.Namespace, users: int
) -> tuple[Run, dict[str, Any]]:
    """qassist's run for `users` employees, and the prompts its model was given."""
    with tempfile.TemporaryDirectory(prefix="qassist-knowledge-") as tmp:
        q = Qassist(
            model,
            args,
            Path(tmp),
            QASSIST_KNOWLEDGE_MIN_SCORE="0.15",
            QASSIST_PREFILL_BACKLOG=str(args.prefill_backlog),
            **dict(item.split("=", 1) for item in args.env),
        )
        # One more account than users: the last one warms up (model, embedder, first search).
        cookies = make_accounts(q.env, {"acme": (users + 1, COMPANY_SYSTEM_PROMPT)})["acme"]
        started = time.perf_counter()
        indexed = manage_shell(
            q.env, INDEX_SCRIPT, json.dumps({"tenant": "acme", "folder": str(HANDBOOK)})
        )
        print(
            f"indexed {indexed['passages']} passages in {time.perf_counter() - started:.0f} s",
            flush=True,
        )

        def scenario(q: Qassist, base: str, ws_url: str) -> Run:
            warm_up = ["Who do I contact about my payslip?"]
            asyncio.run(ws_conversation(ws_url, base, cookies[users], users, warm_up, think=False))
            return run_users(
                "qassist (retrieval, passages in the prompt)",
                users,
                args.turns,
                lambda u, _msgs: ws_conversation(
                    ws_url, base, cookies[u], u, conversation_of(u, args.turns)
                ),
                base,
            )

        run = q.run(scenario)
        prompts = manage_shell(q.env, PROMPTS_SCRIPT)
    return run, prompts


# --- llama-server, given the same prompts ----------------------------------------------------


async def replay_conversation(
    url: str, user: int, system: str, prompts: list[str], max_tokens: int
) -> list[Turn]:
    """qassist's user `user` again, with the prompts its model read and the same think times."""
    return await http_conversation(url, user, prompts, max_tokens, system=system)


def server_knowledge(
    binary: Path, model: Path, args: argparse.Namespace, users: int, prompts: dict[str, Any]
) -> Run:
    port = free_port()
    slots = users
    cmd = [
        str(binary), "-m", str(model), "--port", str(port), "--host", "127.0.0.1",
        "-np", str(slots), "-c", str(slots * 4096), "-t", str(args.threads),
        "-tb", str(args.threads), "--no-webui", *args.server_flags.split(),
    ]  # fmt: skip
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    log = args.logs / f"llama-server-knowledge-{users}.log"
    by_user = {int(u): p for u, p in prompts["users"].items()}
    with process(cmd, env, log) as server:
        wait_http(f"http://127.0.0.1:{port}/health", 180, server, log)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        # The same warm-up as qassist's: the warm-up account's question, with its passages.
        warm_up = by_user.get(users, ["Say OK."])
        asyncio.run(replay_conversation(url, users, prompts["system"], warm_up, 8))
        return run_users(
            f"llama-server -np {slots} {args.server_flags}".strip(),
            users,
            args.turns,
            lambda u, _msgs: replay_conversation(
                url, u, prompts["system"], by_user[u], args.max_tokens
            ),
        )


def markdown(pairs: list[tuple[Run, Run | None, dict[str, Any]]]) -> str:
    lines = [
        "| users | system | tokens/s | TTFT p50 | TTFT p95 | TTFT p50 by turn | errors | "
        "prompt tokens computed / reused / restored (qassist's worker) | passage tokens given |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for q, s, prompts in pairs:
        for r in (q, s):
            if r is None:
                continue
            turns = sorted({t.turn for t in r.ok})
            by_turn = " / ".join(f"{r.ttft(0.5, t):.2f}" for t in turns)
            w = r.worker
            kv = (
                f"{w['prefill_tokens']} / {w['reused_tokens']} / {w['restored_tokens']}"
                if w
                else "—"
            )
            given = str(prompts["passage_tokens"]) if w else "—"
            lines.append(
                f"| {r.users} | {r.system} | {r.tps:.1f} | {r.ttft(0.5):.2f} s | "
                f"{r.ttft(0.95):.2f} s | {by_turn} | {len(r.turns) - len(r.ok)} | {kv} | "
                f"{given} |"
            )
        if s is not None and s.tps:
            lines.append(
                f"| {q.users} | **ratio qassist / llama-server** | **{q.tps / s.tps:.2f}x** | "
                f"{q.ttft(0.5) / s.ttft(0.5):.2f} | **{q.ttft(0.95) / s.ttft(0.95):.2f}** | | | | |"
            )
    return "\n".join(lines)


def reuse_line(run: Run) -> str:
    w = run.worker
    computed, reused, restored = w["prefill_tokens"], w["reused_tokens"], w["restored_tokens"]
    total = computed + reused + restored
    share = (reused + restored) / total if total else 0.0
    return (
        f"{run.users} users: {total} prompt tokens, {share:.0%} reused "
        f"({reused} copied from other sequences, {restored} restored from host memory, "
        f"{computed} computed)"
    )


def main() -> None:
    from inference import modelstore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--users", default="16,32")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=48)
    parser.add_argument("--context-size", type=int, default=65536)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument("--min-stream-speed", type=float, default=5.0)
    parser.add_argument("--max-wait", type=float, default=90.0)
    parser.add_argument("--host-cache-mb", type=int, default=1024)
    parser.add_argument(
        "--prefill-backlog",
        type=int,
        default=0,
        help="QASSIST_PREFILL_BACKLOG (0: the default, one step's budget; a large value: no gate)",
    )
    parser.add_argument(
        "--server-flags",
        default="--no-kv-unified --cache-reuse 256",
        help="llama-server's KV layout and cache flags (cache_prompt is sent with every "
        "request, its host prompt cache --cache-ram is on by default; --cache-reuse reuses "
        "chunks of a slot's cache shifted in place; --kv-unified shares one pool, where every "
        "token attends over all slots' cells)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another setting for qassist's processes (repeatable), e.g. "
        "QASSIST_MIN_STREAM_SPEED_HARD=1",
    )
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--logs", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-logs-")))
    args = parser.parse_args()
    model = modelstore.resolve_model_path(args.model, ROOT / "models")
    print(f"model {model.name}; logs in {args.logs}", flush=True)
    binary = None
    if not args.skip_server:
        binary = args.llama_server or Path(
            subprocess.run(
                ["bash", str(ROOT / "bench" / "build_llama_server.sh")],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    pairs: list[tuple[Run, Run | None, dict[str, Any]]] = []
    for users in [int(u) for u in args.users.split(",")]:
        run, prompts = qassist_knowledge(model, args, users)
        print(reuse_line(run), flush=True)
        server = None
        if binary is not None:
            server = server_knowledge(binary, model, args, users, prompts)
        pairs.append((run, server, prompts))
        given = [len(p) for ps in prompts["users"].values() for p in ps]
        print(
            f"{users} users: user messages of {statistics.mean(given):.0f} characters on "
            f"average (passages and question), {prompts['passage_tokens']} passage tokens",
            flush=True,
        )
    print(markdown(pairs))
    for run, _, _ in pairs:
        print(reuse_line(run))
    if pairs:
        print_run(pairs[0][0])


if __name__ == "__main__":
    main()
