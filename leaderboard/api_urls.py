"""URLs of the read API, included under /api/v1/ by rcbsite/urls.py."""
from django.urls import path

from . import api, openapi

app_name = "leaderboard_api"

urlpatterns = [
    path("openapi.json", openapi.openapi_json, name="openapi"),
    path("ping", api.ping, name="ping"),
    path("releases", api.releases, name="releases"),
    path("leaderboard", api.leaderboard, name="leaderboard"),
    path("heatmap", api.heatmap, name="heatmap"),
    path("error-categories", api.error_categories, name="error_categories"),
    path("paper-ablation", api.paper_ablation, name="paper_ablation"),
    path("contamination", api.contamination, name="contamination"),
    path("papers/<str:paper_id>", api.paper_detail, name="paper"),
    path("papers/<str:paper_id>/leaderboard", api.paper_leaderboard, name="paper_leaderboard"),
    path("evaluations/<int:evaluation_id>/outputs.jsonl", api.evaluation_outputs, name="evaluation_outputs"),
    path("models", api.model_search, name="model_search"),
    path("models/<path:key>", api.model_detail, name="model"),
]
