"""Operator commands of ``gitlab-mcp-gateway`` besides serving (``broker``: ``gateway.cli.broker``)."""
