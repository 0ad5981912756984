from django.urls import path

from signin import views

app_name = "signin"
urlpatterns = [
    path("start/", views.start, name="start"),
    path("callback/", views.callback, name="callback"),
]
