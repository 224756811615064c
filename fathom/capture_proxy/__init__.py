"""fathom.capture_proxy."""
