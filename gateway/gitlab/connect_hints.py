"""What to check when the gateway cannot connect to GitLab: one wording for the start-up line
(``gateway.gitlab.startup_check``) and for the tool error (``gateway.gitlab.client``)."""

from __future__ import annotations

#: A ``GITLAB_URL`` of ``https://`` on a port that speaks plain HTTP: the TLS hello is answered
#: with an HTTP error page, which OpenSSL reports as ``WRONG_VERSION_NUMBER``.
PLAIN_HTTP_PORT = "it does not speak TLS on that port: check whether GITLAB_URL should start with http://"
#: GitLab's certificate did not verify (a private CA, an intercepting proxy, an expired certificate).
CERTIFICATE = "check GitLab's TLS certificate; for a private CA set gitlab.ca_bundle"


def tls_hint(exc: BaseException) -> str | None:
    """What to check for a connection that failed in the TLS handshake, or None for any other
    failure (refused, unresolvable, timed out)."""
    text = str(exc)
    if "WRONG_VERSION_NUMBER" in text:
        return PLAIN_HTTP_PORT
    if "SSL" in text or "certificate" in text.lower():
        return CERTIFICATE
    return None
