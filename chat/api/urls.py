from django.urls import path, re_path

from chat.api import views

app_name = "api"
urlpatterns = [
    path("models", views.models, name="models"),
    path("chat/completions", views.chat_completions, name="chat_completions"),
    path("chat/completions/<str:completion_id>", views.completion_detail, name="completion_detail"),
    path(
        "chat/completions/<str:completion_id>/messages",
        views.completion_messages,
        name="completion_messages",
    ),
    path("openapi.json", views.openapi, name="openapi"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]
