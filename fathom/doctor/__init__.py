"""What `fathom doctor` checks: what this machine offers each component, and a GPU job's prerequisites."""
