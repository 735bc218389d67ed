from django.contrib import admin
from django.urls import include, path

from scoring import queue

urlpatterns = [
    path("admin/", admin.site.urls),
    path("django-rq/", include(queue.URLS_MODULE)),  # the operators' queue pages
    path("api/v1/", include("leaderboard.api_urls")),
    path("accounts/", include("accounts.urls")),
    path("accounts/", include("django.contrib.auth.urls")),  # login, logout, password reset
    # the public pages first: they take the crowds, and Django tries patterns in order
    path("", include("leaderboard.urls")),
    path("", include("submissions.urls")),
    path("", include("contributions.urls")),
]

# under /api/ a URL that matches no route, or a request over Django's limits (fields, file parts,
# size), is answered in JSON, as every API error is
handler400 = "leaderboard.api.bad_request"
handler404 = "leaderboard.api.not_found"
