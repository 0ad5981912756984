from django.urls import path

from sharing import views

app_name = "sharing"
urlpatterns = [
    path("c/<uuid:session_id>/export.md", views.export_markdown, name="export"),
    path("sessions/<uuid:session_id>/share", views.share_create, name="share_create"),
    path("sessions/<uuid:session_id>/shares", views.share_list, name="share_list"),
    path("shares/<uuid:share_id>/revoke", views.share_revoke, name="share_revoke"),
    path("s/<uuid:share_id>/", views.shared, name="shared"),
    path("s/<uuid:share_id>/continue", views.share_continue, name="share_continue"),
]
