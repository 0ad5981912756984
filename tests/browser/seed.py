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


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qassist.settings")
    django.setup()

    from django.contrib.auth.models import User

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

    admin_pages = _seed_admin(acme, beta, [alice, bob], password)
    print(
        json.dumps(
            {
                "xss_session": str(xss.id),
                "chinese_session": str(chinese.id),
                "bob_session": str(bobs.id),
                **admin_pages,
            }
        )
    )


def _seed_admin(acme: Any, beta: Any, people: list[Any], password: str) -> dict[str, Any]:
    """A tenant admin of acme (the superuser `root` is made above), 30 days of usage and
    recurring questions."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from chat.cached_replies import candidate_record
    from tenants.models import Membership, UsageRecord
    from tenants.services import api_key_create
    from tenants.usage import usage_rollup

    carol = User.objects.create_user("carol", "carol@example.com", password, is_staff=True)
    Membership.objects.create(user=carol, tenant=acme, role=Membership.Role.ADMIN)
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
