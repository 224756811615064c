"""fathom.env_server.sandbox."""
