from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Tenant(models.Model):
    """A department or customer team: the unit that owns keys, limits, quotas and usage."""

    slug = models.SlugField(
        max_length=50,
        unique=True,
        help_text="Short name in commands, logs and metrics: lowercase letters, digits, hyphens.",
    )
    name = models.CharField(max_length=200, help_text="What members see in the chat.")
    active = models.BooleanField(
        default=True, help_text="Off: the tenant's members and API keys are refused at once."
    )
    priority = models.SmallIntegerField(
        default=0, help_text="Higher runs first when the engine has a queue."
    )
    # Limits: empty means no limit.
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests in any minute, browser and API together."
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Prompt and reply tokens in any minute."
    )
    max_concurrent_streams = models.PositiveIntegerField(
        null=True, blank=True, help_text="Replies being written at once."
    )
    daily_token_quota = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens per day (days in the deployment's TIME_ZONE)."
    )
    monthly_token_quota = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens per calendar month."
    )
    system_prompt = models.TextField(
        blank=True, help_text="Prepended to every conversation of this tenant."
    )
    # Models (issue #36): which model answers its members, and which others they may pick.
    default_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="The model that answers this tenant's members and API keys when they name "
        "none. Empty: the deployment's default (QASSIST_MODEL).",
    )
    allowed_models = models.JSONField(
        default=list,
        blank=True,
        help_text="Other models its members and API keys may ask for by name (REST's `model`, "
        "the chat's picker). The default model is always allowed.",
    )
    # Privacy (docs/privacy.md): without the content audit nobody reads conversations' text in
    # the admin; with it, superusers and the tenant's admins may, each reading is logged
    # (chat.ContentRead), and members see a notice in the chat.
    content_audit = models.BooleanField(
        default=False,
        help_text="On: superusers and this tenant's admins can read its conversations in the "
        "admin; every reading is logged (Content reads) and members see a notice in the chat. "
        "Off: the admin shows who used qassist, when and how much, never what was written. "
        "Only superusers switch it.",
    )
    content_audit_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
        verbose_name="content audit switched on by",
    )
    content_audit_since = models.DateTimeField(
        null=True, blank=True, editable=False, verbose_name="content audit on since"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name or self.slug


class PromptSuggestion(models.Model):
    """A suggestion on a new chat of the tenant: a click sends its prompt. Edited by the
    tenant's admins (Tenants › a tenant › Prompt suggestions); a tenant with none shows the
    built-in four (tenants.services.prompt_suggestions_for)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="prompt_suggestions")
    title = models.CharField(
        max_length=60, help_text="The suggestion's bold first line, e.g. “Draft an email”."
    )
    prompt = models.TextField(
        max_length=2000, help_text="What is sent when someone clicks it (shown under the title)."
    )
    position = models.PositiveSmallIntegerField(default=0, help_text="Lower comes first.")

    class Meta:
        ordering = ["tenant", "position", "id"]

    def __str__(self) -> str:
        return self.title


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        ADMIN = "admin", "Tenant admin"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(
        max_length=16,
        choices=Role.choices,
        default=Role.MEMBER,
        help_text="A tenant admin with a staff account runs this tenant in the admin.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "member"
        verbose_name_plural = "members"
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_user_tenant")
        ]
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class TenantGroup(models.Model):
    """A group of a tenant's people that documents can be limited to ("Managers", "HR"): a
    Django group (`group`, named "<tenant slug>: <name>" so two tenants may both have an
    "HR"), whose members are kept by hand in the admin or, for people who sign in through the
    identity provider, from their groups there (signin.GroupMapping with a tenant group)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="groups")
    name = models.CharField(
        max_length=100, help_text="What admins and API keys call it, e.g. “HR”."
    )
    group = models.OneToOneField(
        "auth.Group", on_delete=models.CASCADE, related_name="tenant_group", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "tenant group"
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenantgroup_tenant_name")
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A tenant's key for the REST API. Only the readable prefix and an HMAC digest are stored."""

    class Scope(models.TextChoices):
        ALL = "all", "All documents of the tenant"
        GROUPS = "groups", "Documents open to everyone, and those of the chosen groups"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, help_text="What uses it, e.g. “helpdesk bot”.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    digest = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty: the key does not expire."
    )
    revoked_at = models.DateTimeField(
        null=True, blank=True, help_text="Set by the action “Revoke selected keys”."
    )
    # Which of the tenant's documents answers to this key may rest on (docs/knowledge.md,
    # "Who may read what"). Keys made before groups existed read everything, as they did.
    document_scope = models.CharField(
        max_length=8,
        choices=Scope.choices,
        default=Scope.ALL,
        verbose_name="documents it may read",
        help_text="Documents limited to groups answer this key only when it may read them.",
    )
    groups = models.ManyToManyField(
        TenantGroup,
        blank=True,
        related_name="api_keys",
        help_text="With “the chosen groups”: the groups whose documents it may read.",
    )

    class Meta:
        ordering = ["tenant__slug", "-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class UsageRecord(models.Model):
    """One served request: who asked, what it cost, how it went."""

    class Status(models.TextChoices):
        OK = "ok", "OK"
        CANCELLED = "cancelled", "Cancelled"
        ERROR = "error", "Error"
        REJECTED = "rejected", "Rejected"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="usage",
        verbose_name="API key",
    )
    session = models.ForeignKey(
        "chat.ChatSession",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="conversation",
    )
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached = models.BooleanField(default=False, verbose_name="from the cache")
    # The model that answered ("" before issue #36, or nothing was generated).
    model = models.CharField(max_length=200, blank=True, default="")
    latency_ms = models.PositiveIntegerField(null=True, blank=True, verbose_name="latency (ms)")
    ttft_ms = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="time to first token (ms)"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OK)
    # Why a request was refused (rejected) or failed (error): a limit's name or an error code.
    reason = models.CharField(
        max_length=32,
        blank=True,
        db_index=True,
        help_text="Why it was refused or failed (a limit or an error code); "
        "“background” and “batch” for work nobody waited for.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)

    class Meta:
        verbose_name = "usage record"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "created_at"], name="usage_tenant_time")]

    def __str__(self) -> str:
        return f"{self.tenant} {self.prompt_tokens}+{self.completion_tokens} ({self.status})"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


# Time-to-first-token histogram buckets (upper bounds in ms; the last is open-ended). Daily
# roll-ups keep counts per bucket so percentiles over any days, tenants or users can be summed
# in SQL and read off the merged histogram.
TTFT_BUCKETS_MS: tuple[int, ...] = (
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 20000,
)  # fmt: skip


class UsageDaily(models.Model):
    """UsageRecord summed per local day, tenant, user and API key (a Celery beat roll-up), so
    the usage pages never scan millions of records for days that are over."""

    day = models.DateField()
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    model = models.CharField(max_length=200, blank=True, default="")
    # Requests people or integrations made (not rejected); background work (titles, batch
    # items) is counted apart: its tokens count, but it would distort hit rates.
    requests = models.PositiveIntegerField(default=0)
    background = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    cache_hits = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    ttft_count = models.PositiveIntegerField(default=0)
    # Counts of TTFT in (previous bound, bound], by TTFT_BUCKETS_MS; b13: above the last bound.
    ttft_b00 = models.PositiveIntegerField(default=0)
    ttft_b01 = models.PositiveIntegerField(default=0)
    ttft_b02 = models.PositiveIntegerField(default=0)
    ttft_b03 = models.PositiveIntegerField(default=0)
    ttft_b04 = models.PositiveIntegerField(default=0)
    ttft_b05 = models.PositiveIntegerField(default=0)
    ttft_b06 = models.PositiveIntegerField(default=0)
    ttft_b07 = models.PositiveIntegerField(default=0)
    ttft_b08 = models.PositiveIntegerField(default=0)
    ttft_b09 = models.PositiveIntegerField(default=0)
    ttft_b10 = models.PositiveIntegerField(default=0)
    ttft_b11 = models.PositiveIntegerField(default=0)
    ttft_b12 = models.PositiveIntegerField(default=0)
    ttft_b13 = models.PositiveIntegerField(default=0)
    # The longest TTFT of the row: the open last bucket's upper end, so a percentile that falls
    # in it is read up to a real wait instead of stopping at 20 s (issue #31). 0: none, or a
    # row rolled up before this was kept.
    ttft_max_ms = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"
        ordering = ["-day"]
        indexes = [
            models.Index(fields=["tenant", "day"], name="usagedaily_tenant_day"),
            models.Index(fields=["day"], name="usagedaily_day"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day}"


class UsageDailyReason(models.Model):
    """Refusals and errors per local day, tenant, user, API key and reason (the roll-up's)."""

    day = models.DateField()
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=UsageRecord.Status.choices)
    reason = models.CharField(max_length=32, blank=True)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["tenant", "day"], name="usagereason_tenant_day")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.status} {self.reason}: {self.count}"


class UsageRollupProgress(models.Model):
    """One row: the last local day whose usage is in UsageDaily. Later records are read live."""

    rolled_through = models.DateField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"rolled up through {self.rolled_through}"
