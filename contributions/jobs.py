"""RQ entry points of the contributions' kinds of job: they take a job's id and its attempt's RQ id
and run the service under ``scoring.jobs.job_execute`` (claim, heartbeat, end; the row is the truth)."""
from __future__ import annotations

from scoring.evaluate import environment_job_end
from scoring.jobs import job_execute

from .release_services import release_baseline_score
from .services import contribution_validate

__all__ = ["validate_contribution", "score_baseline"]


def validate_contribution(job_id: int, rq_job_id: str) -> bool:
    def body(job, beat) -> bool:
        report = contribution_validate(contribution_id=job.contribution_id, revision=job.revision)
        return bool(report and report.get("passed"))

    return bool(job_execute(job_id=job_id, rq_job_id=rq_job_id, body=body).result)


def score_baseline(job_id: int, rq_job_id: str) -> float | None:
    def body(job, beat) -> float | None:
        outcome = release_baseline_score(evaluation_id=job.evaluation_id, paper_id=job.paper.paper_id, beat=beat)
        environment_job_end(outcome)  # the paper's environment fails here: the job waits for a repair
        return outcome.evaluation.scaled_pass_rate if outcome.evaluation is not None else None

    return job_execute(job_id=job_id, rq_job_id=rq_job_id, body=body).result
