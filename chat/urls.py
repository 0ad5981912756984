from django.urls import path

from chat import views

app_name = "chat"
urlpatterns = [
    path("", views.index, name="index"),
    path("c/<uuid:session_id>/", views.conversation, name="conversation"),
    path("c/<uuid:session_id>/messages", views.session_messages, name="messages"),
    path("sessions/", views.session_list, name="session_list"),
    path("sessions/measure", views.draft_measure, name="draft_measure"),
    path("sessions/<uuid:session_id>/rename", views.session_rename, name="session_rename"),
    path("sessions/<uuid:session_id>/archive", views.session_archive, name="session_archive"),
    path("sessions/<uuid:session_id>/pin", views.session_pin, name="session_pin"),
    path("settings/instructions", views.custom_instructions, name="custom_instructions"),
    path("sessions/<uuid:session_id>/branch", views.session_branch, name="session_branch"),
    path("sessions/<uuid:session_id>/restore", views.session_restore, name="session_restore"),
    path("sessions/<uuid:session_id>/delete", views.session_delete, name="session_delete"),
    path(
        "sessions/<uuid:session_id>/documents",
        views.session_documents,
        name="session_documents",
    ),
    path("documents", views.attachment_new_chat, name="attachment_new_chat"),
    path("documents/<uuid:document_id>", views.attachment, name="attachment"),
    path("documents/<uuid:document_id>/file", views.document_file, name="document_file"),
    path("passages/<int:passage_id>", views.passage, name="passage"),
    path("tenant/switch", views.tenant_switch, name="tenant_switch"),
    path("favicon.ico", views.favicon, name="favicon"),
]
