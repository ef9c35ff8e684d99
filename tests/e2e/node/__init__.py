"""A package, so that the conftest's package-scoped cluster (and its real node) ends with the last test here: pytest
scopes a directory without __init__.py like the session, which kept this node running under the tests after it."""
