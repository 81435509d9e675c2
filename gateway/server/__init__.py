"""The composition layer: the application built from the layers below it, and what serves it.

- ``app``: :func:`~gateway.server.app.create_app`, the aiohttp application (``/mcp``,
  ``/healthz``, ``/readyz``, ``/metrics``);
- ``services``: the app-wide :class:`~gateway.server.services.Services` (GitLab client, caches,
  broker), their app key, and :func:`~gateway.server.services.build_services`, the default way
  to build them;
- ``health``: ``/healthz`` and ``/readyz``;
- ``metrics_listener``: the optional second listener (``/metrics`` and the probes only);
- ``startup_check``: the start-up request to GitLab, run once the services are up.

This package sits on top: only ``gateway.__main__`` imports it, and nothing in it is imported
back by the layers it composes (``tests/unit/test_layers.py`` holds them to that).
"""
