"""A not-found message tells the caller what to check, in terms of the credential they used."""

from __future__ import annotations

from gateway.gitlab.credentials import Credential
from gateway.tools.visibility import project_not_found_message


async def _renewed() -> Credential:
    raise AssertionError("not called")


def test_a_signed_in_person_is_told_to_check_their_gitlab_account_not_a_token() -> None:
    signed_in = Credential(header="Authorization", token="oauth-token", renew=_renewed)
    text = project_not_found_message("g/p", signed_in)
    assert "the GitLab account you signed in with can read the project" in text
    assert "token" not in text
    own = Credential(header="PRIVATE-TOKEN", token="glpat-x")
    assert "your GitLab token can read the project" in project_not_found_message("g/p", own)
