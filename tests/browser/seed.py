"""Seed the live server's fresh database: `python -m tests.browser.seed` (run by conftest.py).

Prints one JSON line describing what it made (ids the tests navigate to).
"""

from __future__ import annotations

import json
import os

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

    print(
        json.dumps(
            {
                "xss_session": str(xss.id),
                "chinese_session": str(chinese.id),
                "bob_session": str(bobs.id),
            }
        )
    )


if __name__ == "__main__":
    main()
