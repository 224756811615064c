"""fathom.policy_server."""
