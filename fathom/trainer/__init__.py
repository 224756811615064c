"""fathom.trainer."""
