"""What the configured GitLab offers: GitLab CE (Community Edition) or EE (Enterprise Edition).

Some fields exist only on EE (``Project.duoContextExclusionSettings``). GitLab's answer is the only
reliable source: a CE instance refuses a whole query that names such a field with graphql-ruby's
validation error, ``Field '<field>' doesn't exist on type '<type>'``. The first such refusal makes
:class:`Capabilities` say CE for the rest of the process (an instance does not change edition under
a running gateway; restart it after an upgrade), and tools then send their CE documents.

Likewise whether GitLab lists an artifacts archive's files (its artifacts tree API, GitLab 18.8):
learnt from the first answer to that route (``gateway.tools.ci.artifact_entries``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.gitlab.errors import GitLabBadRequest


class Edition(StrEnum):
    """GitLab's edition, as far as its answers told."""

    UNKNOWN = "unknown"
    CE = "ce"
    EE = "ee"


@dataclass
class Capabilities:
    """The configured GitLab's edition, learnt from its answers (one per gateway process).

    Attributes:
        edition: ``UNKNOWN`` until an answer tells; EE fields are tried while unknown.
        artifacts_tree: whether GitLab lists an artifacts archive's files
            (``GET /projects/:id/jobs/:job_id/artifacts/tree``, GitLab 18.8 and later): None until
            an answer tells, False once an older GitLab answered that route with its single-file
            download's 404 (the gateway then reads the archive's zip directory instead).
    """

    edition: Edition = Edition.UNKNOWN
    artifacts_tree: bool | None = None

    @property
    def is_ce(self) -> bool:
        """True once GitLab refused an EE-only field."""
        return self.edition is Edition.CE

    def learn_from(self, err: GitLabBadRequest, *, type_name: str, field: str) -> bool:
        """Record CE when ``err`` is GitLab refusing exactly the EE-only ``type_name.field``.

        Only that one message counts: it turns EE features off for every caller, so an error that
        merely names the field among others (or another type's) must not.

        Returns:
            True when ``err`` was that refusal (send the CE document instead).
        """
        # The client's message is "<summary>: <GitLab's messages, joined by '; '>": exactly one.
        if err.message.partition(": ")[2] != f"Field '{field}' doesn't exist on type '{type_name}'":
            return False
        self.edition = Edition.CE
        return True
