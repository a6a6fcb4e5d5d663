"""One BLAS and one OpenMP thread in every process the suite runs (a pytest plugin: pyproject's addopts load it
before any conftest, so before numpy or torch is imported).

The suite's workers, their stacks, services and trainers share the machine's cores. A numpy, torch or llama.cpp
pool of threads that spins while it waits for a busy core does the same work for two to three times the CPU
(docs/development.md, "A fast suite", has the measurements), so each process computes on one thread; a setting
the caller made is kept.
"""

import os

import pytest

# The variables that size numpy's OpenBLAS and torch's OpenMP pools (MKL's where a wheel brings it).
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    for name, value in ONE_THREAD.items():
        os.environ.setdefault(name, value)


def one_thread() -> dict[str, str]:
    """The thread settings this process runs with, for an environment built from nothing (a trainer's)."""
    return {name: os.environ.get(name, value) for name, value in ONE_THREAD.items()}
