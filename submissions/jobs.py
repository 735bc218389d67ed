"""RQ entry points: they take ids and call a service (the database row says what to do)."""
from __future__ import annotations

from . import services

__all__ = ["score_paper", "generate_answers"]


def score_paper(job_id: int, rq_job_id: str) -> str:
    return services.scoring_job_run(job_id=job_id, rq_job_id=rq_job_id)


def generate_answers(job_id: int, rq_job_id: str) -> str | None:
    from .runs import generation_job_run  # noqa: PLC0415

    return generation_job_run(job_id=job_id, rq_job_id=rq_job_id)
