"""What can be done to one job in the stand-in: retry it
(``POST /projects/:id/jobs/:job_id/retry``, https://docs.gitlab.com/api/jobs/#retry-a-job).

As GitLab's ``lib/api/ci/jobs.rb`` does: the caller needs ``update_build`` (Developer and up, else
``403 Forbidden``); a job that is not retryable (still going, or already retried: GitLab retries
the latest run of a finished job) is ``403 Forbidden - Job is not retryable``; otherwise the job is
marked retried, a new job of the same name is added to its pipeline, pending, and the answer is
``201`` with the new job.
"""

from __future__ import annotations

from tests.standin import job_logs
from tests.standin.rest_api import RestOutcome, RestRequest, job_entity, not_found, route

#: ``Ci::Build#retryable?``: a finished job (``complete?``) that was not retried yet.
RETRYABLE = frozenset({"SUCCESS", "FAILED", "CANCELED"})


@route("POST", "/projects/:id/jobs/:job_id/retry")
def _retry(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, pl, job = job_logs._job(req, params)
    if error or pl is None or job is None:
        return error or not_found()
    project = req.world.projects[pl.project_id]
    if not project.can_update_pipeline(req.user):
        return RestOutcome(403, {"message": "403 Forbidden"})
    if job.retried or job.status not in RETRYABLE:
        return RestOutcome(403, {"message": "403 Forbidden - Job is not retryable"})
    clone = req.world.retry_job(pl, job)
    if pl.status in ("FAILED", "CANCELED", "SUCCESS"):
        pl.status, pl.finished_at, pl.duration = "RUNNING", None, None
    return RestOutcome(201, job_entity(req, pl, clone))
