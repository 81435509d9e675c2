"""GitLab MCP gateway: MCP Streamable HTTP in front of GitLab's REST and GraphQL APIs."""

from importlib.resources import files

#: The release: semantic versioning (docs/operations.md, "Releases"); its tag is ``v<version>``.
__version__ = "0.3.0"


def _revision() -> str:
    # setup.py bakes the git revision into the wheel and the sdist; scripts/run writes the
    # checkout's at each start; a checkout otherwise run as it is (the tests) has none.
    try:
        return files("gateway").joinpath("REVISION").read_text(encoding="utf-8").strip() or "unknown"
    except (FileNotFoundError, NotADirectoryError):
        return "unknown"


#: The git commit this build was made from (``+dirty``: with changes not committed), or ``unknown``.
REVISION = _revision()

#: The command's name (``gitlab-mcp-gateway``): its messages start with it.
PROG = "gitlab-mcp-gateway"
