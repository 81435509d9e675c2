"""GitLab MCP gateway: MCP Streamable HTTP in front of GitLab's REST and GraphQL APIs."""

__version__ = "0.1.0"
