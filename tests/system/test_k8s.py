"""deploy/k8s, checked without a cluster: every overlay rendered by kustomize, every document validated, and what
the manifests promise checked against the code.

Validation is strict, like `kubectl apply`'s default field validation: an unknown field is an error. Built-in
kinds are checked against the Kubernetes API's JSON schemas (the kubernetes-validate package ships them), KEDA's
and the Prometheus Operator's against their CRDs' openAPIV3Schema, and a redis-streams trigger's metadata against
the names KEDA's scaler reads (which KEDA would otherwise ignore silently). kustomize, the CRDs and the scaler's
source come pinned from their Go modules through `make k8s-tools`, cached outside the repo; the test runs it.
"""

import copy
import importlib
import re
import subprocess
import typing
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from rubricd.keys import ANALYZERS, ARM, CANARIES, COMPARERS, SCORERS, SUMMARIZERS, UPDATERS, Keys
from rubricd_services.gateway.settings import GatewaySettings
from rubricd_services.runtime.service import ServiceApp
from rubricd_services.settings import AGENT_DEFAULTS, LLMSettings

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES = "1.37"  # the API version the built-in kinds are checked against
CONSUMERS = ("scorer", "comparer", "arm", "analyzer", "summarizer", "updater")
METRICS_PORT = 9100  # rubricd-config's RUBRICD_METRICS_PORT
GATEWAY_PORT = GatewaySettings.model_fields["gateway_port"].default

# What each overlay renders: a test that validated nothing cannot pass.
OVERLAYS = {
    "demo": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 1, "Service": 5, "StatefulSet": 2, "Deployment": 9},
        **{"StorageClass": 1, "PersistentVolume": 2},
    },
    "local": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 2, "Service": 5, "StatefulSet": 2, "Deployment": 9},
        **{"StorageClass": 1, "PersistentVolume": 2, "ScaledObject": 6, "TriggerAuthentication": 1, "PodMonitor": 1},
    },
    "production": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 1, "Service": 4, "StatefulSet": 2, "Deployment": 8},
        **{"ScaledObject": 6, "TriggerAuthentication": 1, "PodMonitor": 1},
    },
    "locked-down": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 1, "Service": 4, "StatefulSet": 2, "Deployment": 8},
        **{"ScaledObject": 6, "TriggerAuthentication": 1, "PodMonitor": 1},
    },
    "trainer-access": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 1, "Service": 5, "StatefulSet": 2, "Deployment": 8},
        **{"ScaledObject": 6, "TriggerAuthentication": 1, "PodMonitor": 1},
    },
    "external-redis": {
        **{"Namespace": 1, "ConfigMap": 1, "Secret": 1, "Service": 3, "StatefulSet": 1, "Deployment": 8},
        **{"ScaledObject": 6, "TriggerAuthentication": 1, "PodMonitor": 1},
    },
}

# The demo overlay's node: 2 CPUs (minikube's default), of which the demo may ask half; the rest is the cluster's
# own (minikube's control plane and CoreDNS ask 0.75 CPU) and KEDA's extra scorers' where it runs.
DEMO_NODE_CPU_M = 2000
DEMO_BUDGET_CPU_M = DEMO_NODE_CPU_M // 2


@cache
def tools() -> Path:
    subprocess.run(["make", "-s", "k8s-tools"], cwd=ROOT, check=True, timeout=900)
    done = subprocess.run(["make", "-s", "--no-print-directory", "k8s-tools-path"], cwd=ROOT, capture_output=True)
    return Path(done.stdout.decode().strip())


def render(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run([tools() / "kustomize", "build", path], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def strict(schema: Any) -> Any:
    """A CRD's schema with unknown fields refused: the API server prunes them, `kubectl apply` refuses them."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict schema, for every version of every CRD `make k8s-tools` fetched."""
    schemas = {}
    for path in tools().glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            schemas[key] = strict(version["schema"]["openAPIV3Schema"])
    return schemas


@cache
def keda_redis_names() -> tuple[frozenset[str], frozenset[str]]:
    """The trigger metadata and the authentication parameters KEDA's redis-streams scaler reads, from its source:
    its `keda:"name=a;b, order=..."` tags (a name read from the environment is given as `<name>FromEnv`)."""
    structs = [
        (tools() / "redis_streams_scaler.go", "redisStreamsMetadata"),
        (tools() / "redis_scaler.go", "redisConnectionInfo"),
    ]
    metadata, auth = set(), set()
    for path, struct in structs:
        body = re.search(rf"type {struct} struct {{(.*?)\n}}", path.read_text(), re.S)
        assert body, f"{struct} not in {path}"
        for names, order in re.findall(r'keda:"name=([^,"]+),\s*order=([^,"]+)', body.group(1)):
            for name in names.split(";"):
                if "triggerMetadata" in order:
                    metadata.add(name)
                if "resolvedEnv" in order:
                    metadata.add(f"{name}FromEnv")
                if "authParams" in order:
                    auth.add(name)
    return frozenset(metadata), frozenset(auth)


def validate(doc: dict[str, Any]) -> None:
    """Raise if `doc` is not a valid object of its kind (a kind with no schema is an error too)."""
    schema = crd_schemas().get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        return
    jsonschema.validate(doc, schema)
    metadata_names, auth_names = keda_redis_names()
    for trigger in doc["spec"].get("triggers", []) if doc["kind"] == "ScaledObject" else []:
        if trigger["type"] == "redis-streams" and (unknown := set(trigger["metadata"]) - metadata_names):
            raise jsonschema.ValidationError(f"redis-streams trigger: KEDA reads no metadata {sorted(unknown)}")
    for ref in doc["spec"].get("secretTargetRef", []) if doc["kind"] == "TriggerAuthentication" else []:
        if ref["parameter"] not in auth_names:
            raise jsonschema.ValidationError(f"KEDA's redis scalers read no parameter {ref['parameter']!r}")


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


@cache
def wiring(service: str) -> ServiceApp[Any]:
    """The service's ServiceApp as its `create_app` wires it, with default settings (nothing connects)."""
    built: list[ServiceApp[Any]] = []
    real_build = ServiceApp.build

    def build(self: ServiceApp[Any], *args: Any, **kwargs: Any) -> Any:
        built.append(self)
        return real_build(self, *args, **kwargs)

    module = importlib.import_module(f"rubricd_services.{service}.app")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ServiceApp, "build", build)
        module.create_app(typing.get_type_hints(module.create_app)["settings"]())
    return built[0]


def longest_call_s(service: str) -> float:
    """The longest timeout of the service's LLM agents, by default (AGENT_DEFAULTS, else LLMSettings')."""
    default = LLMSettings.model_fields["timeout_s"].default
    return max(float(AGENT_DEFAULTS[agent].get("timeout_s", default)) for agent in wiring(service).agents)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_document_of_each_overlay_validates(overlay: str) -> None:
    docs = render(K8S / "overlays" / overlay)
    for doc in docs:
        validate(doc)
    assert Counter(doc["kind"] for doc in docs) == OVERLAYS[overlay]


def test_the_secret_example_validates() -> None:
    validate(yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text()))


def test_each_service_is_probed_scraped_given_resources_and_time_to_finish() -> None:
    deployments = of_kind(render(K8S / "overlays" / "production"), "Deployment")
    assert set(deployments) == {*CONSUMERS, "gateway", "dashboard"}
    dashboard = deployments.pop("dashboard")["spec"]["template"]["spec"]
    (container,) = dashboard["containers"]
    assert container["command"][:3] == ["rubricd", "serve", "dashboard"]
    assert {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")} == {"/health"}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        port = METRICS_PORT if name in CONSUMERS else GATEWAY_PORT
        (named,) = [p["name"] for p in container["ports"] if p["containerPort"] == port]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": named}, (name, probe)
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(port),
            "prometheus.io/path": "/metrics",
        }, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert container["command"] == ["rubricd", "serve", name]
        # Long enough to finish the longest LLM call in flight (the gateway: a request's whole deadline): a consumer
        # waits for its handlers RUBRICD_GRACEFUL_TIMEOUT_S, and Kubernetes waits longer than that.
        if name in CONSUMERS:
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            graceful = float(env["RUBRICD_GRACEFUL_TIMEOUT_S"])
            assert graceful >= longest_call_s(name), name
            assert pod["spec"]["terminationGracePeriodSeconds"] > graceful, name
        else:
            needed = GatewaySettings.model_fields["deadline_s"].default
            assert pod["spec"]["terminationGracePeriodSeconds"] >= needed, name


def test_locked_down_redis_loads_the_acl_file_and_weaviate_wants_its_key() -> None:
    docs = render(K8S / "overlays" / "locked-down")
    redis = of_kind(docs, "StatefulSet")["redis"]["spec"]["template"]["spec"]
    (container,) = redis["containers"]
    assert container["args"][-2:] == ["--aclfile", "/etc/rubricd/users.acl"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/rubricd"]
    (volume,) = [v for v in redis["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "rubricd-redis-acl"
    assert "--user admin" in container["readinessProbe"]["exec"]["command"][-1]  # default is off: the probe logs in
    weaviate = of_kind(docs, "StatefulSet")["weaviate"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in weaviate["env"]}
    assert env["AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED"]["value"] == "false"
    assert env["AUTHENTICATION_APIKEY_ALLOWED_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == "rubricd-weaviate-key"
    (auth,) = of_kind(docs, "TriggerAuthentication").values()  # KEDA logs in as its own user
    assert {r["parameter"]: r["name"] for r in auth["spec"]["secretTargetRef"]} == {
        "address": "rubricd-keda-redis",
        "username": "rubricd-keda-user",
        "password": "rubricd-keda-user",
    }
    # Every service still reads its own Secret (its Redis user's URL), which wins over the shared ones.
    for name, deployment in of_kind(docs, "Deployment").items():
        (service,) = deployment["spec"]["template"]["spec"]["containers"]
        assert service["envFrom"][-1] == {"secretRef": {"name": f"rubricd-{name}", "optional": True}}, name


def test_trainer_access_exposes_only_redis_tls_port_still_behind_the_acl_file() -> None:
    """Trainers outside the cluster: Redis also serves TLS on 6380 (its certificate from `rubricd-redis-tls`,
    clients proving themselves by password), the LoadBalancer exposes that port alone, and the ACL file still
    decides who may do what; inside the cluster the services keep 6379."""
    docs = render(K8S / "overlays" / "trainer-access")
    redis = of_kind(docs, "StatefulSet")["redis"]["spec"]["template"]["spec"]
    (container,) = redis["containers"]
    args = container["args"]
    flags = dict(zip(args[1::2], args[2::2]))
    assert flags["--aclfile"] == "/etc/rubricd/users.acl" and flags["--tls-port"] == "6380"
    assert flags["--tls-auth-clients"] == "no"
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/rubricd/tls"]
    (volume,) = [v for v in redis["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "rubricd-redis-tls"
    assert all(flags[f].startswith(mount["mountPath"] + "/") for f in ("--tls-cert-file", "--tls-key-file"))
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"redis": 6379, "redis-tls": 6380}
    services = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Service"}
    exposed = services["redis-trainers"]
    assert exposed["type"] == "LoadBalancer" and [p["targetPort"] for p in exposed["ports"]] == ["redis-tls"]
    assert services["redis"].get("type", "ClusterIP") == "ClusterIP"  # the plain port stays inside


def test_the_simulator_is_only_in_the_demo_and_labelled_a_test_tool() -> None:
    simulator = of_kind(render(K8S / "overlays" / "demo"), "Deployment")["simulator"]
    assert simulator["metadata"]["labels"]["rubricd.dev/test-tool"] == "true"
    for overlay in ("production", "external-redis"):
        assert "simulator" not in of_kind(render(K8S / "overlays" / overlay), "Deployment")


def test_each_consumer_is_scaled_on_the_groups_it_reads() -> None:
    keys = Keys("rubricd")  # the namespace the manifests deploy (RUBRICD_NAMESPACE unset)
    expected = {
        "scorer": {(keys.rollouts, SCORERS)},
        "comparer": {(keys.comparisons, COMPARERS)},
        "arm": {(keys.arm, ARM)},
        "analyzer": {(keys.scored, ANALYZERS)},
        "summarizer": {(keys.steps, SUMMARIZERS), (keys.analyses, SUMMARIZERS)},
        "updater": {(keys.summaries, UPDATERS)},
    }
    for overlay in ("production", "external-redis"):
        scaled = of_kind(render(K8S / "overlays" / overlay), "ScaledObject")
        assert set(scaled) == set(CONSUMERS)
        for name, obj in scaled.items():
            assert obj["spec"]["scaleTargetRef"]["name"] == name
            triggers = obj["spec"]["triggers"]
            assert {t["type"] for t in triggers} == {"redis-streams"}
            groups = {(t["metadata"]["stream"], t["metadata"]["consumerGroup"]) for t in triggers}
            # The canaries' consumer group (the scorers' judge canaries, on the canary steps) is not scaled on: no rollout
            # waits on it, and its entries follow the scorers' own.
            read = set(wiring(name).consumer_groups) - {(keys.canary_steps, CANARIES)}
            assert groups == expected[name] == read, name
            # Per group, one trigger on its lag and one on what its replicas hold (each at most max_in_flight).
            in_flight = str(wiring(name).settings.max_in_flight)
            for group in groups:
                on = [
                    t["metadata"]
                    for t in triggers
                    if (t["metadata"]["stream"], t["metadata"]["consumerGroup"]) == group
                ]
                assert sorted(k for m in on for k in set(m) - {"stream", "consumerGroup"}) == [
                    "lagCount",
                    "pendingEntriesCount",
                ]
                assert [m["pendingEntriesCount"] for m in on if "pendingEntriesCount" in m] == [in_flight], name
    assert wiring("gateway").consumer_groups == []  # scaled by hand: it reads no group


def test_the_updater_never_runs_twice() -> None:
    docs = render(K8S / "overlays" / "production")
    assert of_kind(docs, "ScaledObject")["updater"]["spec"]["maxReplicaCount"] == 1
    assert of_kind(docs, "Deployment")["updater"]["spec"]["strategy"] == {"type": "Recreate"}


def test_a_broken_manifest_is_refused() -> None:
    docs = render(K8S / "overlays" / "production")
    deployment = of_kind(docs, "Deployment")["analyzer"]
    scaled = of_kind(docs, "ScaledObject")["analyzer"]
    broken: list[dict[str, Any]] = []

    def breaking(doc: dict[str, Any]) -> dict[str, Any]:
        broken.append(copy.deepcopy(doc))
        return broken[-1]

    breaking(deployment)["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/x"
    breaking(deployment)["spec"]["replicas"] = "two"
    del breaking(deployment)["spec"]["selector"]
    breaking(scaled)["spec"]["triggers"][0]["metdata"] = {}
    breaking(scaled)["spec"]["minReplicaCount"] = "one"
    breaking(scaled)["spec"]["triggers"][0]["metadata"]["lagcount"] = "32"  # KEDA reads lagCount
    breaking(of_kind(docs, "TriggerAuthentication")["rubricd-keda-redis"])["spec"]["secretTargetRef"][0][
        "parameter"
    ] = "adress"
    breaking(of_kind(docs, "PodMonitor")["rubricd"])["spec"]["podMetricsEndpoints"][0]["prot"] = "metrics"
    breaking({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledThing", "metadata": {"name": "x"}})
    for doc in broken:
        with pytest.raises((jsonschema.ValidationError, kubernetes_validate.SchemaNotFoundError)):
            validate(doc)


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else round(float(quantity) * 1000)


def cpu_requested_m(docs: list[dict[str, Any]]) -> dict[str, int]:
    """Each workload's CPU requests in millicores, times its replicas, as the scheduler adds them up."""
    asked = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            containers = doc["spec"]["template"]["spec"]["containers"]
            each = sum(millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in containers)
            asked[doc["metadata"]["name"]] = each * doc["spec"].get("replicas", 1)
    return asked


def fits_the_demo_node(docs: list[dict[str, Any]]) -> None:
    asked = cpu_requested_m(docs)
    assert sum(asked.values()) <= DEMO_BUDGET_CPU_M, (
        f"the demo asks {sum(asked.values())}m CPU, over its {DEMO_BUDGET_CPU_M}m of a {DEMO_NODE_CPU_M}m node: "
        + ", ".join(f"{name} {m}m" for name, m in sorted(asked.items(), key=lambda kv: -kv[1]))
    )


def test_the_demo_fits_a_two_cpu_node() -> None:
    docs = render(K8S / "overlays" / "demo")
    fits_the_demo_node(docs)
    assert sum(cpu_requested_m(docs).values()) == 600  # 11 pods: the figure the overlay's comment gives


def test_a_demo_asking_more_than_the_node_is_caught() -> None:
    docs = render(K8S / "overlays" / "demo")
    for doc in docs:
        if doc["metadata"]["name"] == "analyzer" and doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 10
    with pytest.raises(AssertionError, match=r"asks 1050m CPU, over its 1000m .* analyzer 500m"):
        fits_the_demo_node(docs)
    # The production overlay's sizes are a larger node's (docs/operators/kubernetes.md gives it).
    with pytest.raises(AssertionError, match="over its"):
        fits_the_demo_node(render(K8S / "overlays" / "production"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_claim_names_its_class_and_every_image_may_be_loaded_on_the_node(overlay: str) -> None:
    docs = render(K8S / "overlays" / overlay)
    for name, stateful in of_kind(docs, "StatefulSet").items():
        (claim,) = stateful["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["storageClassName"], name
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            pod = doc["spec"]["template"]["spec"]
            for container in pod["containers"] + pod.get("initContainers", []):
                assert container["imagePullPolicy"] == "IfNotPresent", (doc["metadata"]["name"], container["name"])


def test_the_demo_binds_its_claims_without_a_provisioner() -> None:
    docs = render(K8S / "overlays" / "demo")
    (storage_class,) = of_kind(docs, "StorageClass").values()
    assert storage_class["provisioner"] == "kubernetes.io/no-provisioner"
    volumes = {v["spec"]["capacity"]["storage"]: v for v in of_kind(docs, "PersistentVolume").values()}
    for name, stateful in of_kind(docs, "StatefulSet").items():
        (claim,) = stateful["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["storageClassName"] == storage_class["metadata"]["name"]
        # One volume of the claim's size, of its class: the claim binds it and no other.
        volume = volumes.pop(claim["spec"]["resources"]["requests"]["storage"])
        assert volume["spec"]["storageClassName"] == storage_class["metadata"]["name"], name
    assert not volumes


def test_the_local_cluster_runs_the_keda_whose_crds_validate_the_manifests() -> None:
    """deploy/local/cluster.sh installs KEDA from its module; the offline check validates against the CRDs of the
    version the Makefile pins: the same one."""
    script = (ROOT / "deploy" / "local" / "cluster.sh").read_text()
    pinned = re.search(r"^KEDA_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert pinned and f"KEDA_VERSION={pinned[1]}\n" in script
