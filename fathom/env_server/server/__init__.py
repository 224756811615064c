"""fathom.env_server.server."""
