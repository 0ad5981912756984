"""Feedback in the admin: the ratings as records (who rated which reply, when, up or down, the
reason), and the feedback page — worst-rated questions, best-rated answers with "Make a cached
reply", questions the documents did not answer — under the privacy rules of docs/privacy.md
(feedback/services.py says which texts show when)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from chat.admin.shared import ReadOnlyRecordAdmin, readable_ids, reader
from chat.content_audit import content_read_record
from chat.models import CachedReply
from feedback import services
from feedback.models import Feedback
from tenants.admin_scope import admin_tenants, tenant_filter

REPORT_URL = "admin:feedback_feedback_report"


@admin.register(Feedback)
class FeedbackAdmin(ReadOnlyRecordAdmin[Feedback]):
    """Ratings as records: like a message's status, not its text. A person's comment shows
    only under the tenant's content audit, each reading logged."""

    change_list_template = "admin/feedback/feedback/change_list.html"
    change_form_template = "admin/feedback/feedback/change_form.html"
    list_display = ["updated_at", "rating", "reason", "reply", "tenant", "rated_by"]
    list_filter = ["rating", "reason", tenant_filter(), "updated_at"]
    list_select_related = ["tenant", "user", "api_key", "message"]
    search_fields = ["user__username", "api_key__prefix", "=message__session__id"]
    search_help_text = "Finds ratings by who gave them, or by conversation id."
    record_fields = [
        "tenant",
        "reply",
        "rated_by",
        "rating",
        "reason",
        "created_at",
        "updated_at",
    ]

    def get_fields(self, request: HttpRequest, obj: Feedback | None = None) -> list[Any]:
        if obj is not None and obj.tenant_id in readable_ids(request):
            return [*self.record_fields[:5], "comment", *self.record_fields[5:]]
        return list(self.record_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.get_fields(request, obj)]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a rating goes with its reply, or when its author takes it back

    @admin.display(description="reply", ordering="message_id")
    def reply(self, obj: Feedback) -> str:
        url = reverse("admin:chat_message_change", args=[obj.message_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.message))

    @admin.display(description="rated by")
    def rated_by(self, obj: Feedback) -> str:
        if obj.user is not None:
            return obj.user.get_username()
        return f"API key {obj.api_key.prefix}…" if obj.api_key is not None else "an API key"

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        feedback = self.get_object(request, object_id)
        readable = (
            feedback is not None
            and self.has_view_permission(request, feedback)
            and feedback.tenant_id in readable_ids(request)
        )
        if readable and feedback is not None and feedback.comment and request.method == "GET":
            reply = feedback.message
            content_read_record(reader=reader(request), session=reply.session, message=reply)
        context = {"content_shown": readable, "record": feedback, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    # --- the feedback page ---------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "report/",
                self.admin_site.admin_view(self.report_view),
                name="feedback_feedback_report",
            ),
            path(
                "make-cached-reply/<int:reply_id>/",
                self.admin_site.admin_view(self.promote_view),
                name="feedback_feedback_promote",
            ),
        ]
        return own + super().get_urls()

    def report_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        tenants = admin_tenants(request)
        report = services.feedback_report(reader=request.user, tenants=tenants)
        context = {
            **self.admin_site.each_context(request),
            "title": "Feedback: what to improve",
            "report": report,
            "opts": self.model._meta,
            "may_promote": self._may_add_reply(request),
            "one_tenant": tenants is not None and tenants.count() == 1,
            "audited": bool(readable_ids(request)),
        }
        return TemplateResponse(request, "admin/feedback/feedback/report.html", context)

    def _may_add_reply(self, request: HttpRequest) -> bool:
        reply_admin = self.admin_site.get_model_admin(CachedReply)
        return bool(reply_admin.has_add_permission(request))

    def promote_view(self, request: HttpRequest, reply_id: int) -> HttpResponse:
        """One click: a cached reply (disabled) made from a well-rated answer, then its page
        to review and enable it."""
        if request.method != "POST":
            return HttpResponseRedirect(reverse(REPORT_URL))
        if not self.has_view_permission(request) or not self._may_add_reply(request):
            raise PermissionDenied
        user = request.user if request.user.is_authenticated else None
        try:
            reply, made = services.feedback_promote(
                reader=request.user,
                tenants=admin_tenants(request),
                reply_id=reply_id,
                user=user,
            )
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return HttpResponseRedirect(reverse(REPORT_URL))
        if not made:
            self.message_user(request, "This question has a cached reply already.", messages.INFO)
        else:
            reply_admin = self.admin_site.get_model_admin(CachedReply)
            reply_admin.log_addition(request, reply, [{"added": {}}])
            self.message_user(
                request,
                "Made a cached reply from the rated answer, disabled: check it, tick “Enabled” "
                "and save.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(reverse("admin:chat_cachedreply_change", args=[reply.pk]))
