from django.contrib import admin
from django.urls import include, path

from inference import views as inference_views
from qassist import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("v1/", include("chat.api.urls")),
    path("metrics", inference_views.metrics_view, name="metrics"),
    path("admin/engine/", inference_views.engine_status, name="engine_status"),
    path("admin/", admin.site.urls),
    path("accounts/oidc/", include("signin.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("feedback.urls")),
    path("", include("sharing.urls")),
    path("", include("chat.urls")),
]

handler400 = views.bad_request
handler403 = views.permission_denied
handler404 = views.page_not_found
handler500 = views.server_error
