from django.apps import AppConfig


class SigninConfig(AppConfig):
    """Sign-in through the company's identity provider (OpenID Connect)."""

    name = "signin"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        from signin import checks, signals  # noqa: F401  (registers the checks and receivers)
