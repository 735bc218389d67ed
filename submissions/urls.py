from django.urls import path

from . import api, views

app_name = "submissions"

urlpatterns = [
    path("submit/", views.submission_create, name="submission_create"),
    path("submissions/", views.submission_list, name="submission_list"),
    path("submissions/<int:pk>/", views.submission_detail, name="submission_detail"),
    path("submissions/<int:pk>/<slug:action>/", views.submission_action, name="submission_action"),
    path("review/submissions/", views.review_queue, name="review_queue"),
    path("review/evaluations/<int:pk>/clear-flags/", views.evaluation_flags_clear, name="evaluation_flags_clear"),
    path("staff/environments/", views.environments_page, name="environments"),
    path("runs/new/", views.run_create, name="run_create"),
    path("runs/<int:pk>/", views.run_detail, name="run_detail"),
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run_cancel"),
    path("api/v1/runs", api.runs_endpoint, name="api_runs"),
    path("api/v1/runs/<int:pk>", api.run_endpoint, name="api_run"),
    path("api/v1/runs/<int:pk>/cancel", api.run_cancel_endpoint, name="api_run_cancel"),
    path("api/v1/queue", api.queue_endpoint, name="api_queue"),
    path("api/v1/submissions", api.submissions_endpoint, name="api_submissions"),
    path("api/v1/submissions/", api.submissions_endpoint),
    path("api/v1/submissions/<int:pk>", api.submission_endpoint, name="api_submission"),
    path("api/v1/submissions/<int:pk>/", api.submission_endpoint),
    path("api/v1/submissions/<int:pk>/<slug:action>", api.submission_publish_endpoint, name="api_submission_action"),
]
