"""Operators' view of the one job model: every kind of job, read-only (the rows are the workers')."""
from django.contrib import admin

from .models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "submission", "contribution", "revision", "evaluation", "paper", "status", "attempt",
                    "worker", "heartbeat_at", "rq_job_id")
    list_filter = ("kind", "status", "queue")
    readonly_fields = [f.name for f in Job._meta.fields]
