from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from chat.cache import cached_replies_changed
        from chat.models import CachedReply

        # Every process's cached-reply index hears of each change (chat/cache.py).
        post_save.connect(cached_replies_changed, sender=CachedReply, dispatch_uid="cr-save")
        post_delete.connect(cached_replies_changed, sender=CachedReply, dispatch_uid="cr-delete")
