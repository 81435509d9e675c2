"""A health probe for containers without curl: ``python -m gateway.observability.probe [URL]``.

Exits 0 when ``URL`` answers 200 within the timeout, 1 otherwise (with one line on stderr saying
why, with ``/readyz``'s ``reason`` when it gives one). The default URL is
``http://127.0.0.1:<port>/healthz`` with the port from ``GATEWAY_SERVER__PORT`` (else 8080).
Proxy variables are ignored: the probe talks to the gateway beside it, never through
``HTTP_PROXY``. Used by the ``Dockerfile``'s ``HEALTHCHECK``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request


def default_url() -> str:
    """``http://127.0.0.1:<GATEWAY_SERVER__PORT or 8080>/healthz``."""
    return f"http://127.0.0.1:{os.environ.get('GATEWAY_SERVER__PORT') or 8080}/healthz"


def probe(url: str, timeout: float = 3.0) -> tuple[bool, str]:
    """GET ``url`` without proxies; ``(True, "200")`` on HTTP 200, else ``(False, why)``."""
    if not url.startswith(("http://", "https://")):
        return False, f"not an http(s) URL: {url}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as err:
        return False, f"{url} answered {err.code}" + _reason(err)
    except (urllib.error.URLError, OSError) as err:
        return False, f"{url} did not answer: {getattr(err, 'reason', err)}"
    return status == 200, str(status)


def _reason(err: urllib.error.HTTPError) -> str:
    """``": <reason>"`` from a ``/readyz`` body that names one, else ``""``."""
    try:
        body = json.loads(err.read(64 * 1024))
    except (OSError, ValueError):
        return ""
    reason = body.get("reason") if isinstance(body, dict) else None
    return f": {reason}" if isinstance(reason, str) else ""


def main(argv: list[str] | None = None) -> int:
    """Probe once; exit status 0 (healthy) or 1."""
    parser = argparse.ArgumentParser(prog="python -m gateway.observability.probe", description=__doc__)
    parser.add_argument("url", nargs="?", default=None, help="default: " + default_url())
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    ok, why = probe(args.url or default_url(), args.timeout)
    if not ok:
        print(f"unhealthy: {why}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
