from typing import Any

from django.apps import AppConfig


def _leave_groups(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Someone who leaves a tenant leaves its groups too: coming back later does not bring
    back what the groups let them read."""
    from tenants.models import TenantGroup

    groups = TenantGroup.objects.filter(tenant_id=instance.tenant_id).values_list(
        "group_id", flat=True
    )
    instance.user.groups.remove(*groups)


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from tenants.models import Membership

        post_delete.connect(_leave_groups, sender=Membership, dispatch_uid="tenants-leave-groups")
