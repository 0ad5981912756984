from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Company knowledge"

    def ready(self) -> None:
        from inference.service import register_passages
        from knowledge.passage_kv import find_passages, passage_source

        # Where passages are in prompts, and which passages the documents hold: the engine
        # computes their KV once (QASSIST_PASSAGE_KV).
        register_passages(find_passages, passage_source)
        from knowledge import signals

        signals.connect()
