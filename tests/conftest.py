"""The suite's shared fixtures and hooks, one module per job in tests/support (its __init__ lists them): the stack,
ports, a test's namespace, services as processes, the trainers' venvs, the in-process simulator, waiting,
metrics and how a session runs. Every run ends with where its time went (tests/timing.py); pytester runs a suite
of a test's own."""

pytest_plugins = [
    "tests.support.ports",  # before the modules that import it, so that pytest rewrites its asserts
    "tests.support.stack",
    "tests.support.namespace",
    "tests.support.services",
    "tests.support.frameworks",
    "tests.support.simulator",
    "tests.support.waiting",
    "tests.support.metrics",
    "tests.support.session",
    "tests.timing",
    "pytester",
]
