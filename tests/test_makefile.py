"""The Makefile's targets, read by make itself (`make -n`: what a target would run, nothing run)."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def debian_packages(*args: str) -> set[str]:
    """The Debian packages `make ARGS` would install where missing: apt_missing's command:package pairs."""
    done = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return {pair.split(":")[1] for pairs in re.findall(r"for pair in ([^;]*);", done.stdout) for pair in pairs.split()}


def test_each_target_installs_only_the_debian_packages_it_runs():
    stack = {"redis-server", "python3-venv", "openssl"}  # openssl: the stack's TLS (make up TLS=1)
    assert debian_packages("demo") == stack  # no browser, no Docker engine, no debootstrap
    assert debian_packages("up") == stack
    assert debian_packages("demo", "LLM=local") == stack | {"cmake", "g++"}  # llama.cpp's server is built
    assert debian_packages("demo", "STACK=compose") == stack | {"docker.io", "debootstrap"}
    suite = {"chromium", "chromium-driver", "docker.io", "debootstrap", "bubblewrap", "cmake", "g++"}
    assert debian_packages("test") == stack | suite


def test_the_kubernetes_tests_install_what_their_cluster_and_images_need():
    # tests/k8s builds the cluster and deploy/docker/images.sh's images onto it: Docker and debootstrap are needed
    assert {"docker.io", "debootstrap"} <= debian_packages("k8s-test")
