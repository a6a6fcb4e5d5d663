"""The suite's fixtures and hooks, one module per job; tests/conftest.py registers them all (pytest_plugins).

- `stack`: the test stack (Redis, Weaviate, the simulator) per session, and extra stacks on fresh ports.
- `ports`: free loopback ports, a worker's own range, and a whole stack's ports from a base.
- `namespace`: a test's own namespace, its keys, its Redis client and its evaluation memory.
- `services`: services, the CLI and the dashboard as processes in the test's namespace.
- `frameworks`: the trainers' venvs (`make frameworks`, ...) and a script of tests/frameworks run by one.
- `simulator`: an in-process LLM simulator.
- `waiting`: waiting for what the system does (`eventually`, `drained`, `settled`).
- `metrics`: reading a /metrics page.
- `session`: how a session runs (integration marks, the slow directories first, SIGTERM as Ctrl-C).
"""
