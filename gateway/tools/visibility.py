"""What a "not found" says about who looked.

GitLab answers "not found" alike for what does not exist and for what the credential may not
see (https://docs.gitlab.com/api/rest/troubleshooting/), so a not-found message tells the caller
to check the token. A gateway in service mode without ``GITLAB_TOKEN`` has no token: it reads
anonymously and sees public projects only, and its messages say that, and how to set one,
instead.
"""

from __future__ import annotations

from gateway.gitlab.credentials import Credential

#: For an anonymous caller, in place of "check your token".
ANONYMOUS_READS = (
    "This gateway reads GitLab anonymously (no GITLAB_TOKEN set), so only public projects are visible: "
    "to see private ones, set GITLAB_TOKEN to a token with the read_api scope (api to run pipelines) "
    "where the gateway starts, and restart it."
)


def is_anonymous(credential: Credential | None) -> bool:
    """The call reads GitLab without a token (service mode, no ``GITLAB_TOKEN``)."""
    return credential is not None and not credential.token


def and_token_can(credential: Credential | None, what: str) -> str:
    """The end of a not-found message's "Check ..." sentence: `` and that your GitLab token can
    {what}.``; for a person signed in through GitLab (who holds no GitLab token of their own),
    `` and that the GitLab account you signed in with can {what}.``; for an anonymous caller,
    ``.`` and :data:`ANONYMOUS_READS`."""
    if is_anonymous(credential):
        return f". {ANONYMOUS_READS}"
    if credential is not None and credential.renew is not None:
        return f" and that the GitLab account you signed in with can {what}."
    return f" and that your GitLab token can {what}."


def anonymous_note(credential: Credential | None) -> str:
    """`` `` and :data:`ANONYMOUS_READS` for an anonymous caller (appended to a message that
    ends with a full stop), else nothing."""
    return f" {ANONYMOUS_READS}" if is_anonymous(credential) else ""


def project_not_found_message(project: str, credential: Credential | None) -> str:
    """For a project GitLab does not show (missing or hidden: it does not say which): what to check,
    or, for an anonymous caller, that only public projects are visible."""
    return (
        f"Project '{project}' not found or inaccessible. Check the project ID or full path (for example "
        "`group/subgroup/project`)" + and_token_can(credential, "read the project")
    )
