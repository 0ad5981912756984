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
    path("sessions/<uuid:session_id>/branch", views.session_branch, name="session_branch"),
    path("sessions/<uuid:session_id>/restore", views.session_restore, name="session_restore"),
    path("sessions/<uuid:session_id>/delete", views.session_delete, name="session_delete"),
    path("tenant/switch", views.tenant_switch, name="tenant_switch"),
    path("favicon.ico", views.favicon, name="favicon"),
]
