from django.urls import path

from feedback import views

app_name = "feedback"
urlpatterns = [
    path("messages/<int:message_id>/feedback", views.reply_feedback, name="reply_feedback"),
]
