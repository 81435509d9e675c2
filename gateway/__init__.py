"""GitLab MCP gateway: MCP Streamable HTTP in front of GitLab's REST and GraphQL APIs."""

__version__ = "0.1.0"
#: The command's name (``gitlab-mcp-gateway``): its messages start with it.
PROG = "gitlab-mcp-gateway"
