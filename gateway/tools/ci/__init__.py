"""CI/CD tools: ``get_pipeline``, ``save_pipeline``, ``list_pipelines`` and the superseded pipeline reads."""
