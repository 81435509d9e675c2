"""What the tests' own HTTP clients share."""

from __future__ import annotations

import ssl

#: The TLS context of the tests' httpx clients, made once per process: httpx otherwise loads the
#: CA bundle for every client it makes (about 35 ms of CPU), plain-HTTP ones to 127.0.0.1
#: included. Polling /healthz with a new client every 50 ms cost a gateway's start more CPU than
#: the start itself, and slowed it.
TLS = ssl.create_default_context()
