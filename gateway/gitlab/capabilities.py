"""What the configured GitLab offers that only its answers tell.

Whether GitLab lists an artifacts archive's files (its artifacts tree API, GitLab 18.8): learnt
from the first answer to that route (``gateway.tools.ci.artifact_entries``). GitLab's version and
edition, which choose the GraphQL documents, are :mod:`gateway.gitlab.instance`'s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Capabilities:
    """What the configured GitLab's answers told (one per gateway process).

    Attributes:
        artifacts_tree: whether GitLab lists an artifacts archive's files
            (``GET /projects/:id/jobs/:job_id/artifacts/tree``, GitLab 18.8 and later): None until
            an answer tells, False once an older GitLab answered that route with its single-file
            download's 404 (the gateway then reads the archive's zip directory instead).
    """

    artifacts_tree: bool | None = None
