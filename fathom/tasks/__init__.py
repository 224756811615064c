"""fathom.tasks."""
