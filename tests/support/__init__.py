"""Code only the tests use: checkpoint generators, small graphs, the export-bytes record."""
