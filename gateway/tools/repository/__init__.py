"""Repository tools: ``get_repository_file``."""
