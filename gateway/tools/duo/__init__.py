"""GitLab Duo Agent Platform tools: ``get_duo_session``."""
