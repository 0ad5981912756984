"""Who signed in through the identity provider, which groups give which tenants, and the
sign-in sessions that must be re-checked with the provider."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from tenants.models import Membership, Tenant, TenantGroup


class Identity(models.Model):
    """A person as the identity provider knows them: (issuer, subject), never the e-mail
    alone, which a provider may let someone else take after its owner left."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255, help_text="The provider's `sub`: never reused.")
    email = models.CharField(max_length=254, blank=True, help_text="As last signed in.")
    groups = models.JSONField(default=list, blank=True, help_text="As last signed in.")
    # The mapping made this account staff (a tenant admin's role); only then does it take it back.
    staff_from_groups = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_checked_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The provider last vouched for this person (a sign-in or a session's re-check).",
    )
    refused_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The provider refused to renew a session: the account "
        "was deactivated and its API keys revoked. A later sign-in through the provider "
        "activates it again (keys stay revoked).",
    )

    class Meta:
        verbose_name = "identity"
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_issuer_subject")
        ]
        ordering = ["user__username"]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"


class GroupMapping(models.Model):
    """People in `group` at the identity provider are members (or admins) of `tenant`. A tenant
    with at least one mapping takes its single-sign-on members from them alone."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="group_mappings")
    group = models.CharField(
        max_length=255,
        help_text="The group exactly as the provider sends it in the groups claim (a name, or "
        "an id for Microsoft Entra ID). Applied at each sign-in and session re-check; a tenant "
        "with mappings takes its single-sign-on members from them alone, and someone whose "
        "groups no longer map loses the membership. Local-password accounts are never touched.",
    )
    role = models.CharField(
        max_length=16, choices=Membership.Role.choices, default=Membership.Role.MEMBER
    )

    class Meta:
        verbose_name = "group mapping"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "group"], name="groupmapping_tenant_group")
        ]
        ordering = ["tenant__slug", "group"]

    def __str__(self) -> str:
        return f"{self.group} → {self.tenant} ({self.get_role_display()})"


class TenantGroupMapping(models.Model):
    """People in `group` at the identity provider are in `tenant_group` (documents limited to
    it are theirs to read), while they are members of its tenant. A tenant group with at least
    one mapping takes its single-sign-on members from them alone; one without is kept by hand.
    Unlike GroupMapping, it gives no membership: a group is inside a tenant."""

    group = models.CharField(
        max_length=255,
        help_text="The group exactly as the provider sends it in the groups claim. Applied at "
        "each sign-in and session re-check: someone whose groups no longer map leaves the "
        "tenant group. Local-password accounts are never touched.",
    )
    tenant_group = models.ForeignKey(
        TenantGroup, on_delete=models.CASCADE, related_name="mappings", verbose_name="tenant group"
    )

    class Meta:
        verbose_name = "tenant group mapping"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_group", "group"], name="tenantgroupmapping_group"
            )
        ]
        ordering = ["tenant_group__tenant__slug", "tenant_group__name", "group"]

    def __str__(self) -> str:
        return f"{self.group} → {self.tenant_group.tenant}: {self.tenant_group}"


class ProviderSession(models.Model):
    """A login session that came from the identity provider: when it must be re-checked, and
    the refresh token to do it with (encrypted under SECRET_KEY)."""

    session_key = models.CharField(max_length=40, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_sessions"
    )
    refresh_token = models.TextField(blank=True)
    checked_at = models.DateTimeField(default=timezone.now)
    due_at = models.DateTimeField(db_index=True)
    # One process renews a session at a time (a rotated refresh token is single-use): the
    # one that set this until it is done or it passes.
    renewing_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "sign-in session"

    def __str__(self) -> str:
        return f"{self.user} until {self.due_at:%Y-%m-%d %H:%M}"
