# Modules, not classes: an AppConfig class imported here would count as one of this module's.
from axes import apps as axes_apps
from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class QassistConfig(AppConfig):
    default = True  # this module also holds the configs of the admin and of django-axes
    name = "qassist"
    verbose_name = "qassist"

    def ready(self) -> None:
        from qassist import checks  # noqa: F401  (registers the system checks)


class QassistAdminConfig(admin_apps.AdminConfig):
    """Django's admin with qassist's site (qassist/admin_site.py) as the default `admin.site`:
    its name, and the index grouped by what staff do."""

    default = False
    default_site = "qassist.admin_site.QassistAdminSite"


class SignInConfig(axes_apps.AppConfig):  # type: ignore[misc]  # axes is untyped
    """django-axes (login lockouts) under a name staff understand, in breadcrumbs and titles."""

    default = False
    verbose_name = "Sign-ins"
