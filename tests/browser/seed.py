"""Seed the live server's fresh database: `python -m tests.browser.seed` (run by conftest.py).

Prints one JSON line describing what it made (ids the tests navigate to).
"""

from __future__ import annotations

import json
import os
import random
from datetime import timedelta
from typing import Any

import django

# The reply the XSS test renders, stored and served as a cached answer so that it does not
# depend on the model. Every payload would both record itself and open a dialog if it ran.
XSS_REPLY = """Here are some payloads, all of which must stay inert:

<script>window.__xss=(window.__xss||[]).concat('script');alert('script')</script>

<img src=x onerror="window.__xss=(window.__xss||[]).concat('img');alert('img')">

Inline <img src=y onerror="window.__xss=(window.__xss||[]).concat('inline');alert('inline')"> html.

[x](javascript:alert(1))

[click me](javascript:window.__xss=(window.__xss||[]).concat('link'))

<a href="javascript:alert('raw')">raw link</a>

[a safe link](https://example.com/docs)

```html
<script>alert('inside a code block')</script>
```
"""

XSS_QUESTION = (
    "<img src=q onerror=\"window.__xss=(window.__xss||[]).concat('question');alert('q')\"> "
    "show me the payloads"
)

CHINESE_REPLY = """当然可以！下面是一个简单的 Python 例子，演示如何读取文件：

```python
def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\\n") for line in f]
```

- **要点一**：使用 `with` 语句自动关闭文件。
- **要点二**：指定 `encoding="utf-8"`，中文不会乱码。

Mixed text works too: 中文 and English in one line, 全角标点（如这样）也正常显示。
"""


# Company knowledge (tests/browser/test_knowledge.py): Northwind's handbook, uploaded by its tenant
# admin and indexed at seed time; and a file Bob attached to one of his conversations in Acme.
HANDBOOK = """# Northwind employee handbook

## Travel

Hotel nights are reimbursed up to EUR 180 in Paris and EUR 140 elsewhere. Book trains in
second class; first class is allowed only for journeys over four hours.

## Leave

Every employee has 27 days of paid leave a year. Ask your manager at least two weeks before
you go.

## IT

The VPN is called NorthGate. Report a lost laptop to the service desk within 24 hours, at
extension 4242.

## Office

The Lyon office is at 12 rue des Tanneurs, third floor. Reception opens at 8:30.
"""

BOBS_NOTES = """# Orion supplier notes

## Prices

Orion charges 17 credits per crate, delivered on Thursdays only.
"""


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()

    from django.contrib.auth.models import User
    from django.utils import timezone

    from chat.models import CachedReply, ChatSession, Message
    from tenants.models import Membership
    from tenants.services import tenant_create

    password = os.environ["QASSIST_SEED_PASSWORD"]
    acme = tenant_create(slug="acme", name="Acme")
    beta = tenant_create(slug="beta", name="Beta Labs")
    alice = User.objects.create_user("alice", "alice@example.com", password)
    bob = User.objects.create_user("bob", "bob@example.com", password)
    Membership.objects.create(user=alice, tenant=acme)
    Membership.objects.create(user=alice, tenant=beta)
    Membership.objects.create(user=bob, tenant=acme)
    # Staff, for the admin pages (tests/browser/test_content_security_policy.py).
    User.objects.create_superuser("root", "root@example.com", password)

    xss = ChatSession.objects.create(tenant=acme, user=alice, title="Payload check")
    Message.objects.create(session=xss, role="user", content=XSS_QUESTION)
    Message.objects.create(session=xss, role="assistant", content=XSS_REPLY)

    chinese = ChatSession.objects.create(tenant=acme, user=alice, title="用 Python 读取文件")
    Message.objects.create(session=chinese, role="user", content="怎么用 Python 逐行读取一个文件？")
    Message.objects.create(
        session=chinese, role="assistant", content=CHINESE_REPLY, served_from_cache=True
    )

    bobs = ChatSession.objects.create(tenant=acme, user=bob, title="Bob's private notes")
    Message.objects.create(session=bobs, role="user", content="Only Bob may read this.")

    CachedReply.objects.create(tenant=acme, question=XSS_QUESTION, answer=XSS_REPLY)

    # Beta Labs runs under a content audit (docs/privacy.md): its members are told, its
    # conversations open in the admin, each reading logged. Acme's stay private.
    root = User.objects.get(username="root")
    beta.content_audit = True
    beta.content_audit_by = root
    beta.content_audit_since = timezone.now()
    beta.save()
    audited = ChatSession.objects.create(tenant=beta, user=alice, title="Quarterly numbers")
    question = Message.objects.create(
        session=audited, role="user", content="Summarise the Q3 revenue table for the board."
    )
    Message.objects.create(
        session=audited,
        parent=question,
        role="assistant",
        content="Revenue grew 12% over Q2, led by the services line.",
        prompt_tokens=42,
        completion_tokens=17,
    )

    admin_pages = _seed_admin(acme, beta, [alice, bob], password)
    knowledge_ids = _seed_knowledge(acme, bob, password)
    third_pass = _seed_third_pass(acme, alice, password, knowledge_ids)
    print(
        json.dumps(
            {
                "xss_session": str(xss.id),
                "chinese_session": str(chinese.id),
                "bob_session": str(bobs.id),
                "audited_session": str(audited.id),
                **admin_pages,
                **knowledge_ids,
                **third_pass,
            }
        )
    )


def _chain(session: Any, *turns: tuple[str, str]) -> list[Any]:
    """Messages linked as the chat stores them (each follows the one before; the session shows
    the last): versions and edits grow from them."""
    from chat.models import Message

    made: list[Any] = []
    parent = None
    for role, content in turns:
        parent = Message.objects.create(session=session, parent=parent, role=role, content=content)
        made.append(parent)
    session.branch_tip = parent
    session.save(update_fields=["branch_tip"])
    return made


def _seed_third_pass(
    acme: Any, alice: Any, password: str, knowledge_ids: dict[str, Any]
) -> dict[str, Any]:
    """The chat's third pass (tests/browser/test_chat_third_pass.py): conversations to rate,
    share, export and edit; a long title for the phone drawer; a person whose custom
    instructions change the model's replies (so that nobody else's do); a Northwind answer
    with its sources, for the dark theme."""
    from django.contrib.auth.models import User

    from chat.models import ChatSession, Message
    from tenants.models import Membership

    rate = ChatSession.objects.create(tenant=acme, user=alice, title="Feedback check")
    _chain(
        rate,
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is **Paris**."),
    )
    shared = ChatSession.objects.create(tenant=acme, user=alice, title="Release checklist")
    _chain(
        shared,
        ("user", "What goes in a release checklist?"),
        (
            "assistant",
            "1. Tests pass\n2. Changelog written\n\n```bash\nmake test && git tag v1.2\n```",
        ),
        ("user", "And after the release?"),
        ("assistant", "Announce it, and watch the error rates for a day."),
    )
    edit = ChatSession.objects.create(tenant=acme, user=alice, title="Edit check")
    _chain(
        edit,
        ("user", "Name a fruit."),
        ("assistant", "An apple."),
        ("user", "Name a colour."),
        ("assistant", "Blue."),
    )
    ChatSession.objects.create(
        tenant=acme,
        user=alice,
        title="A very long conversation title that cannot possibly fit in the phone drawer",
    )
    # Rated answers to a question asked often (a candidate since _seed_admin): acme's admin
    # sees them on the feedback page and makes a cached reply of the good one.
    from feedback.models import Feedback

    bob = User.objects.get(username="bob")
    for who, answer, rating, reason in (
        (alice, "Next to the kitchen, room 3.12.", "up", ""),
        (bob, "I do not know.", "down", "wrong"),
    ):
        asked = ChatSession.objects.create(tenant=acme, user=who, title="Printer")
        _, reply = _chain(
            asked, ("user", "Where is the printer on floor 3?"), ("assistant", answer)
        )
        Feedback.objects.create(message=reply, tenant=acme, user=who, rating=rating, reason=reason)
    iris = User.objects.create_user("iris", "iris@example.com", password)
    Membership.objects.create(user=iris, tenant=acme)
    ids: dict[str, Any] = {
        "feedback_session": str(rate.id),
        "share_session": str(shared.id),
        "edit_session": str(edit.id),
    }
    if "handbook_travel_passage" in knowledge_ids:
        from knowledge.models import Chunk, Passage

        erin = User.objects.get(username="erin")
        travel = Chunk.objects.select_related("document").get(
            pk=knowledge_ids["handbook_travel_passage"]
        )
        sourced = ChatSession.objects.create(tenant=travel.tenant, user=erin, title="Hotel budget")
        question, _ = _chain(
            sourced,
            ("user", "How much is a hotel night in Paris?"),
            ("assistant", "Up to EUR 180 a night in Paris [1]."),
        )
        Message.objects.filter(id=question.id).update(grounding="documents")
        Passage.objects.create(
            message=question,
            number=1,
            chunk=travel,
            document=travel.document,
            title=travel.document.title,
            where=travel.where,
        )
        ids["sourced_session"] = str(sourced.id)
    return ids


def _seed_knowledge(acme: Any, bob: Any, password: str) -> dict[str, Any]:
    """Northwind (a tenant of its own, so that Acme's chats stay without documents): its admin
    `dana` uploaded the handbook, `erin` works there. Bob attached notes to a conversation in
    Acme. Documents are indexed here, by the pipeline the Celery task runs."""
    from django.contrib.auth.models import User

    import knowledge.tasks
    from chat.models import ChatSession
    from knowledge import ingest, services
    from tenants.models import Membership
    from tenants.services import tenant_create

    knowledge.tasks.index_dispatch = lambda **_: None  # indexed below, not queued
    northwind = tenant_create(slug="northwind", name="Northwind")
    dana = User.objects.create_user("dana", "dana@example.com", password, is_staff=True)
    erin = User.objects.create_user("erin", "erin@example.com", password)
    Membership.objects.create(user=dana, tenant=northwind, role=Membership.Role.ADMIN)
    Membership.objects.create(user=erin, tenant=northwind)
    handbook = services.document_upload(
        tenant=northwind,
        upload=services.Upload("northwind-handbook.md", HANDBOOK.encode()),
        uploaded_by=dana,
    )
    if ingest.document_index(document_id=handbook.pk, version=handbook.version) != "ready":
        # Indexing counts tokens with the chat model's vocabulary: a seed without the model
        # (tests/qassist/test_database_outage.py) has the documents, not their passages.
        return {}
    travel = handbook.chunks.get(headings__endswith="Travel")

    notes_chat = ChatSession.objects.create(tenant=acme, user=bob, title="Orion notes")
    notes = services.document_upload(
        tenant=acme,
        upload=services.Upload("orion-notes.md", BOBS_NOTES.encode()),
        uploaded_by=bob,
        session_id=notes_chat.id,
    )
    ingest.document_index(document_id=notes.pk, version=notes.version)
    return {
        "handbook_document": str(handbook.pk),
        "handbook_travel_passage": travel.pk,
        "bob_notes_session": str(notes_chat.id),
        "bob_notes_document": str(notes.pk),
        "bob_notes_passage": notes.chunks.get().pk,
    }


def _seed_admin(acme: Any, beta: Any, people: list[Any], password: str) -> dict[str, Any]:
    """A tenant admin of acme (the superuser `root` is made above), a staff account without a
    tenant, 30 days of usage and recurring questions."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from chat.cached_replies import candidate_record
    from tenants.models import Membership, UsageRecord
    from tenants.services import api_key_create
    from tenants.usage import usage_rollup

    carol = User.objects.create_user("carol", "carol@example.com", password, is_staff=True)
    Membership.objects.create(user=carol, tenant=acme, role=Membership.Role.ADMIN)
    # Staff without any tenant: the admin's home tells them what to do (issue #31 point 9).
    User.objects.create_user("sam", "sam@example.com", password, is_staff=True)
    acme.daily_token_quota = 200_000  # room left: the chat UI tests chat as acme members
    acme.monthly_token_quota = 1_500_000
    acme.save()
    key, _ = api_key_create(tenant=acme, name="helpdesk bot")
    rng = random.Random(3)
    now = timezone.now()
    records = []
    for _ in range(3000):
        tenant = acme if rng.random() < 0.7 else beta
        status = rng.choice(["ok"] * 18 + ["rejected", "error"])
        ok = status != "rejected"
        records.append(
            UsageRecord(
                tenant=tenant,
                user=rng.choice(people) if tenant == acme and rng.random() < 0.7 else None,
                api_key=key if tenant == acme and rng.random() < 0.3 else None,
                prompt_tokens=rng.randint(30, 600) if ok else 0,
                completion_tokens=rng.randint(5, 300) if ok else 0,
                cached=ok and rng.random() < 0.15,
                ttft_ms=int(rng.lognormvariate(6.0, 0.7)) if ok else None,
                status=status,
                reason={"rejected": "requests_per_minute", "error": "worker_down"}.get(status, ""),
                created_at=now - timedelta(seconds=rng.random() ** 1.5 * 30 * 86400),
            )
        )
    UsageRecord.objects.bulk_create(records)
    usage_rollup()
    questions = [
        ("How do I connect to the VPN?", "Open the VPN app and sign in with your badge.", 7),
        ("怎么申请年假？", "在 HR 系统里提交年假申请，经理批准后生效。", 5),
        ("Where is the printer on floor 3?", "Next to the kitchen, room 3.12.", 3),
        ("What is the guest wifi password?", "Ask reception: it changes every week.", 2),
    ]
    for question, answer, count in questions:
        for _ in range(count):
            candidate_record(tenant=acme, question=question, answer=answer)
    # A draft asked for and waiting for a worker (nothing runs it here): Beta's, so that acme's
    # admin, whose candidates page the tests click through, sees no page reloading itself.
    from chat.cached_replies import candidate_draft_start

    for _ in range(3):
        waiting = candidate_record(tenant=beta, question="Where is the Q3 deck?", answer="…")
    assert waiting is not None
    candidate_draft_start(candidate=waiting)
    _seed_batches(acme, key)
    return {"acme_id": acme.pk}


def _seed_batches(acme: Any, key: Any) -> None:
    """Two finished batches (a running one would start on the live model when listed)."""
    from django.utils import timezone

    from chat.models import Batch, BatchItem

    now = timezone.now()
    for name, done, failed, cancelled, status in (
        ("Ticket summaries (nightly)", 20, 0, 0, Batch.Status.COMPLETED),
        ("Release notes, 中文翻译", 12, 2, 6, Batch.Status.CANCELLED),
    ):
        total = done + failed + cancelled
        batch = Batch.objects.create(
            tenant=acme, api_key=key, name=name, status=status, total=total, finished_at=now
        )
        outcomes = ["done"] * done + ["failed"] * failed + ["cancelled"] * cancelled
        BatchItem.objects.bulk_create(
            [
                BatchItem(
                    batch=batch,
                    index=i,
                    messages=[{"role": "user", "content": f"Item {i}"}],
                    params={},
                    status=outcome,
                    content=f"Summary {i}" if outcome == "done" else "",
                    error_code="quota_exceeded" if outcome == "failed" else "",
                )
                for i, outcome in enumerate(outcomes)
            ]
        )


if __name__ == "__main__":
    main()
