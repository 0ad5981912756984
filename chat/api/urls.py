from django.urls import path, re_path

from chat.api import batches, embeddings, views
from feedback import api as feedback
from knowledge import api as knowledge

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
    path("embeddings", embeddings.embeddings, name="embeddings"),
    path(
        "chat/completions/<str:completion_id>/feedback",
        feedback.completion_feedback,
        name="completion_feedback",
    ),
    path("batches", batches.batch_collection, name="batches"),
    path("batches/<str:batch_id>", batches.batch_detail, name="batch_detail"),
    path("batches/<str:batch_id>/cancel", batches.batch_cancel, name="batch_cancel"),
    path("batches/<str:batch_id>/results", batches.batch_results, name="batch_results"),
    path("knowledge/documents", knowledge.documents, name="knowledge_documents"),
    path("knowledge/documents/<str:document_id>", knowledge.document, name="knowledge_document"),
    path(
        "knowledge/documents/<str:document_id>/content",
        knowledge.document_content,
        name="knowledge_document_content",
    ),
    path("openapi.json", views.openapi, name="openapi"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]
