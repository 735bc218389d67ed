from django.urls import path

from . import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("profile/", views.profile, name="profile"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
]

