"""Page routes of the leaderboard (the JSON API lives in leaderboard/api_urls.py)."""
from django.urls import path

from . import views

app_name = "leaderboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("leaderboard/", views.leaderboard, name="leaderboard"),
    path("leaderboard/papers/", views.per_paper, name="per_paper"),
    path("leaderboard/contamination-safe/", views.contamination, name="contamination"),
    path("leaderboard/errors/", views.errors, name="errors"),
    path("leaderboard/paper-ablation/", views.ablation, name="ablation"),
    path("releases/", views.releases, name="releases"),
    path("releases/<slug:slug>/", views.release_detail, name="release_detail"),
    # a download of files read at request time (not a page): not in the page cache
    path("releases/<slug:slug>/tasks.jsonl", views.release_tasks, name="release_tasks"),
    path("releases/<slug:slug>/leaderboard/", views.leaderboard, name="release_leaderboard"),
    # model keys may contain dots and slashes (provider/name); the trailing slash ends them
    path("models/<path:key>/", views.model_page, name="model"),
    path("papers/<str:paper_id>/", views.paper_page, name="paper"),
    path("papers/<str:paper_id>/snippet/", views.snippet_page, name="snippet"),
]
