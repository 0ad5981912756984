from django.apps import AppConfig


class QassistConfig(AppConfig):
    name = "qassist"
    verbose_name = "qassist"

    def ready(self) -> None:
        from qassist import checks  # noqa: F401  (registers the system checks)
