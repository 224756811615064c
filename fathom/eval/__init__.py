"""fathom.eval."""
