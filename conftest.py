"""Root pytest configuration: the e2e harness's fixtures (toolchain, cluster, namespace) for every tier."""

pytest_plugins = ["e2e.fixtures"]
