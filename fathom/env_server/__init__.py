"""fathom.env_server."""
