"""The GitLab stand-in for end-to-end tests and benchmarks (see ``tests/standin/README.md``)."""
