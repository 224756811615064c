"""Tools for tests and benchmarks, never for production code: the import rules keep every fathom package (and
every command but `fathom env scripted`, which serves them to tests and benchmarks) from importing this package."""
