"""Versions of messages: each message points at the one it follows, and a session at the last
message of the branch it shows. Existing conversations become one straight branch."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def chain_existing(apps: Any, schema_editor: Any) -> None:
    ChatSession = apps.get_model("chat", "ChatSession")
    Message = apps.get_model("chat", "Message")
    for session in ChatSession.objects.iterator():
        previous = None
        for message in Message.objects.filter(session=session).order_by("created_at", "id"):
            if previous is not None:
                Message.objects.filter(id=message.id).update(parent_id=previous)
            previous = message.id
        if previous is not None:
            ChatSession.objects.filter(id=session.id).update(branch_tip_id=previous)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0003_chatsession_external_user"),
    ]

    operations = [
        migrations.AddField(
            model_name="chatsession",
            name="branch_tip",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="chat.message",
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="children",
                to="chat.message",
            ),
        ),
        migrations.RunPython(chain_existing, migrations.RunPython.noop),
    ]
