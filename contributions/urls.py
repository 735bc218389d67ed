from django.urls import path

from . import views

app_name = "contributions"

urlpatterns = [
    path("contribute/", views.contribution_new, name="new"),
    path("contribute/mine/", views.contribution_mine, name="mine"),
    path("contribute/review/", views.review_queue, name="queue"),
    path("contribute/<int:pk>/", views.contribution_detail, name="detail"),
    path("contribute/<int:pk>/revise/", views.contribution_revise_view, name="revise"),
    path("contribute/<int:pk>/review/", views.contribution_review_view, name="review"),
    path("contribute/releases/", views.releases_admin, name="releases"),
    path("contribute/releases/<slug:slug>/", views.release_admin_detail, name="release"),
]
