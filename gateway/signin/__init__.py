"""Signing people in to the gateway through GitLab (OAuth 2.1): clients, redirects, tokens."""
