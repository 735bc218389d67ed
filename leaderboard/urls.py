"""Page routes of the leaderboard (the JSON API lives in leaderboard/api_urls.py)."""
from django.urls import path

from submissions import views as submission_views
from submissions.selectors import scoring_queue_stamp

from . import feeds, views
from .page_cache import public_page as cached  # public pages: shared cache + conditional GET

app_name = "leaderboard"

urlpatterns = [
    path("", cached(views.home), name="home"),
    path("leaderboard/", cached(views.leaderboard), name="leaderboard"),
    path("leaderboard/papers/", cached(views.per_paper), name="per_paper"),
    path("leaderboard/contamination-safe/", cached(views.contamination), name="contamination"),
    path("leaderboard/errors/", cached(views.errors), name="errors"),
    path("leaderboard/hardest-snippets/", cached(views.hardest_snippets), name="hardest"),
    path("leaderboard/cost/", cached(views.cost), name="cost"),
    path("leaderboard/paper-ablation/", cached(views.ablation), name="ablation"),
    path("releases/", cached(views.releases), name="releases"),
    path("releases/<slug:slug>/", cached(views.release_detail), name="release_detail"),
    # a download of files read at request time (not a page): not in the page cache
    path("releases/<slug:slug>/tasks.jsonl", views.release_tasks, name="release_tasks"),
    path("releases/<slug:slug>/tasks.parquet", views.release_tasks_dataset, name="release_tasks_parquet"),
    path("releases/<slug:slug>/dataset-card.md", views.release_tasks_dataset, {"part": "card"},
         name="release_dataset_card"),
    path("releases/<slug:slug>/leaderboard/", cached(views.leaderboard), name="release_leaderboard"),
    path("models/", cached(views.model_search), name="model_search"),
    path("compare/", cached(views.models_compare), name="compare"),
    # model keys may contain dots and slashes (provider/name); the trailing slash ends them
    path("models/<path:key>/", cached(views.model_page), name="model"),
    path("papers/<str:paper_id>/", cached(views.paper_page), name="paper"),
    path("papers/<str:paper_id>/snippet/", cached(views.snippet_page), name="snippet"),
    # Atom feeds: the page cache keeps them under the releases' data versions, like the pages
    path("feeds/results.atom", cached(feeds.results_feed), name="feed_results"),
    path("feeds/releases.atom", cached(feeds.releases_feed), name="feed_releases"),
    # the scoring queue (the submissions app's page): a live page of the page cache, under the queue's
    # own stamp and a refresh period of QUEUE_PAGE_SECONDS
    path("queue/", cached(stamp=scoring_queue_stamp, live_seconds=submission_views.QUEUE_PAGE_SECONDS)(
        submission_views.queue_page), name="queue"),
    # the API's reference (the JSON API itself is under /api/v1/, leaderboard/api_urls.py)
    path("api/", cached(views.api_reference), name="api_reference"),
]
