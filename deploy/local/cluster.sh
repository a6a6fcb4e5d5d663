#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, for `make k8s-test` and for trying deploy/k8s without a
# laptop cluster: built from Go modules (Kubernetes, etcd, CoreDNS, KEDA) and Debian's containerd, runc and CNI
# plugins, no image registry needed. The control plane, kubelet and kube-proxy run as host processes; CoreDNS,
# KEDA and rubricd run as pods, from images loaded into the cluster's own containerd. Root only (kubelet, mounts,
# iptables); everything the cluster makes is named here and removed by `down`.
#
#   deploy/local/cluster.sh build   # build the binaries once (cached outside the repo; about 14 min cold on 2 cores)
#   deploy/local/cluster.sh up [CRD.yaml...]  # start the cluster with CoreDNS, KEDA (and these CRDs); prints the
#                                   # settings to eval (KUBECONFIG, and PATH for its kubectl)
#   deploy/local/cluster.sh load [IMAGE...]   # copy images from the local Docker into the node (default: the ones
#                                   # deploy/docker/images.sh builds)
#   deploy/local/cluster.sh down    # stop it and remove what it made: processes, mounts, netns, iptables rules,
#                                   # the bridge, cgroups, its state, and the demo's volumes (components/local-storage)
#   deploy/local/cluster.sh leftovers       # print what of the cluster is still on the machine (nothing: exit 0)
#   deploy/local/cluster.sh env     # print KUBECONFIG and the bin directory (eval it)
#
# Addresses: pods 10.244.213.0/24 on the bridge rubricd-k8s0, whose address 10.244.213.1 the API (port 16443) and
# kubelet listen on; Services 10.96.213.0/24. Docs: deploy/k8s/README.md#try-it-on-a-laptop-cluster.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
CACHE=${RUBRICD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rubricd}
K8S_VERSION=v1.34.4   # 1.34: this host runs cgroup v1, which kubelet 1.35+ refuses by default
ETCD_VERSION=v3.6.16
COREDNS_VERSION=v1.14.7
KEDA_VERSION=v2.21.0
BIN=$CACHE/k8s-cluster-$K8S_VERSION-etcd-$ETCD_VERSION-coredns-$COREDNS_VERSION-keda-$KEDA_VERSION
STATE=${RUBRICD_K8S_STATE:-/var/lib/rubricd-k8s}
RUN=/run/rubricd-k8s
NODE=rubricd-node
POD_CIDR=10.244.213.0/24
SERVICE_CIDR=10.96.213.0/24
DNS_IP=10.96.213.10
API_PORT=16443
BRIDGE=rubricd-k8s0
LOCAL_STORAGE=/var/lib/rubricd-local  # deploy/k8s/components/local-storage's volumes, on this node's disk
GATEWAY=10.244.213.1  # the bridge's address: the API, kubelet, and the pods' gateway
CNI_BIN=${RUBRICD_CNI_BIN:-/usr/lib/cni}
ETCD_PORT=12379
CM_PORT=10357
SCHEDULER_PORT=10359
KUBELET_HEALTHZ_PORT=10348
PROXY_METRICS_PORT=10349
PROXY_HEALTHZ_PORT=10356
export KUBECONFIG=$STATE/pki/admin.kubeconfig

say() { echo "cluster: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }
moddir() { go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)",/\1/p'; }

# --- build -------------------------------------------------------------------------------------------------------

# Kubernetes' own module replaces its k8s.io/* staging modules with ./staging paths, which a module depending on
# it cannot see: a wrapper module points each at its published v0.x release instead.
build_kubernetes() {
  local src=$BIN.src/kubernetes minor=${K8S_VERSION#v1.} ; minor=${minor%%.*}
  local staging=v0.${K8S_VERSION#v1.}
  local dir; dir=$(moddir "k8s.io/kubernetes@$K8S_VERSION")
  mkdir -p "$src"
  {
    echo "module rubricd.local/kubernetes"; echo; echo "go 1.24.0"; echo
    echo "require k8s.io/kubernetes $K8S_VERSION"; echo
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#replace \1 => \1 '"$staging"'#p' "$dir/go.mod"
  } >"$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n' >"$src/tools.go"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd" >>"$src/tools.go"
  done
  echo ')' >>"$src/tools.go"
  local v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version ldflags="-s -w"
  for p in $v $c; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$src" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN.new/" \
    k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl})
  # The pod sandbox's process: Kubernetes' own pause.c, static.
  gcc -Os -static -o "$BIN.new/pause" "$dir/build/pause/linux/pause.c"
}

# etcd's main package lives in its root module; a two-line main calls the server module's etcdmain instead.
build_etcd() {
  local src=$BIN.src/etcd
  mkdir -p "$src"
  printf 'module rubricd.local/etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$src/go.mod"
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' \
    >"$src/main.go"
  (cd "$src" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN.new/etcd" .)
}

build_coredns() {
  CGO_ENABLED=0 GOBIN=$BIN.new go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
}

# KEDA's go.mod has replaces of its own, so it is built inside a writable copy of its module (as Compose is).
build_keda() {
  local dir src=$BIN.src/keda
  dir=$(moddir "github.com/kedacore/keda/v2@$KEDA_VERSION")
  rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
  local ldflags="-s -w -X=github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN.new/keda" ./cmd/operator &&
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN.new/keda-adapter" ./cmd/adapter)
  cp -r "$src/config" "$BIN.new/keda-config"
}

cmd_build() {
  [[ -x $BIN/keda ]] && { say "built: $BIN"; return; }
  command -v go >/dev/null || die "no go: the binaries are built from Go modules"
  rm -rf "$BIN.new" && mkdir -p "$BIN.new"
  local t0=$SECONDS
  say "building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, CoreDNS $COREDNS_VERSION, KEDA $KEDA_VERSION into $BIN"
  build_kubernetes; say "kubernetes built ($((SECONDS - t0)) s)"
  build_etcd; say "etcd built ($((SECONDS - t0)) s)"
  build_coredns; say "coredns built ($((SECONDS - t0)) s)"
  build_keda; say "keda built ($((SECONDS - t0)) s)"
  rm -rf "$BIN.src" && mv "$BIN.new" "$BIN"
  say "built in $((SECONDS - t0)) s: $BIN"
}

# --- up ----------------------------------------------------------------------------------------------------------

PKI=$STATE/pki
LOGS=$STATE/logs
CTR=(ctr --address "$RUN/containerd.sock" --namespace k8s.io)

# A process of the cluster's, in a session of its own: `down` stops it by its process group.
start() {
  local name=$1; shift
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}
running() { [[ -f $RUN/$1.pid ]] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
wait_for() {  # WHAT SECONDS COMMAND...: until the command succeeds
  local what=$1 seconds=$2; shift 2
  for _ in $(seq $((seconds * 2))); do "$@" >/dev/null 2>&1 && return; sleep 0.5; done
  die "$what did not come up within $seconds s (logs: $LOGS)"
}

# One CA for the cluster, one for the API's front proxy (aggregated APIs: KEDA's metrics); EC keys.
cert() {  # NAME CN [O] [SAN] [CA]
  local name=$1 cn=$2 org=${3:-} san=${4:-} ca=${5:-ca}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$PKI/$name.key" \
    -subj "/CN=$cn${org:+/O=$org}" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"; [[ -z $san ]] || echo "subjectAltName=$san"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial -days 30 \
    -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}
make_pki() {
  [[ -f $PKI/node.kubeconfig ]] && return
  mkdir -p "$PKI"
  local ca
  for ca in ca front-proxy-ca; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj "/CN=rubricd-k8s-$ca" \
      -keyout "$PKI/$ca.key" -out "$PKI/$ca.crt" 2>/dev/null
  done
  local dns=kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local
  cert apiserver kube-apiserver "" "IP:$GATEWAY,IP:${SERVICE_CIDR%.0/24}.1,DNS:${dns//,/,DNS:}"
  cert admin admin system:masters
  cert node "system:node:$NODE" system:nodes
  cert front-proxy-client front-proxy-client "" "" front-proxy-ca
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key"
  openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  local user
  for user in admin node; do
    cat >"$PKI/$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: rubricd-k8s
    cluster: {server: "https://$GATEWAY:$API_PORT", certificate-authority: $PKI/ca.crt}
users:
  - name: $user
    user: {client-certificate: $PKI/$user.crt, client-key: $PKI/$user.key}
contexts:
  - name: rubricd-k8s
    context: {cluster: rubricd-k8s, user: $user}
current-context: rubricd-k8s
EOF
  done
}

# The pods' bridge, with the address the API and kubelet listen on: made before the first pod, so the control
# plane has an address the pods reach (the CNI bridge plugin takes it over as the pods' gateway).
make_bridge() {
  ip link show "$BRIDGE" >/dev/null 2>&1 && return
  ip link add "$BRIDGE" type bridge
  ip addr add "$GATEWAY/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# kubelet sets these kernel settings for its containers (protectKernelDefaults off): `up` keeps the host's values
# and `down` puts them back.
KERNEL_SETTINGS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
save_kernel_settings() {
  [[ -f $STATE/kernel-settings ]] || sysctl "${KERNEL_SETTINGS[@]}" >"$STATE/kernel-settings"
}
restore_kernel_settings() {
  [[ ! -f $STATE/kernel-settings ]] || sysctl -q -p "$STATE/kernel-settings" || true
}

write_configs() {
  mkdir -p "$STATE/cni/net.d" "$STATE/kubelet"
  cat >"$STATE/cni/net.d/10-rubricd-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rubricd-k8s",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/networks",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF
  cat >"$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/opt"
# restrict_oom_score_adj: a host without CAP_SYS_RESOURCE (a sandbox, a container) cannot lower a process's OOM
# score below containerd's own, as kubelet asks for its pod sandboxes (-998).
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/rubricd-local/pause:k8s"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$RUN/runc"
EOF
  # Evictions and image GC only at the edge: the images are loaded, not pulled, and a shared machine's disk
  # fills and empties on its own.
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GATEWAY
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd.sock
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
failSwapOn: false
oomScoreAdj: 0
failCgroupV1: false
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/volume-plugins
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
serializeImagePulls: false
EOF
}

start_control_plane() {
  local peer=http://127.0.0.1:$((ETCD_PORT + 1))
  running etcd || start etcd "$BIN/etcd" --name rubricd-k8s --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "rubricd-k8s=$peer"
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  running kube-apiserver || start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$GATEWAY" --advertise-address "$GATEWAY" --secure-port "$API_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --authorization-mode Node,RBAC --allow-privileged=true --enable-aggregator-routing=true \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --profiling=false
  wait_for kube-apiserver 120 "$BIN/kubectl" get --raw /readyz
  # The HPA every 5 s instead of 15: KEDA's scaling shows within a test's patience.
  running kube-controller-manager || start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$KUBECONFIG" --bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --use-service-account-credentials=true --horizontal-pod-autoscaler-sync-period 5s --profiling=false
  running kube-scheduler || start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KUBECONFIG" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false
}

start_node() {
  [[ -e /run/containerd ]] || : >"$STATE/made-run-containerd"
  running containerd || start containerd containerd --config "$STATE/containerd.toml"
  wait_for containerd 30 "${CTR[@]}" version
  load_cluster_images
  # kube-proxy leaves the host's conntrack settings, localhost and its OOM score (like kubelet's) as they are.
  running kube-proxy || start kube-proxy "$BIN/kube-proxy" --kubeconfig "$KUBECONFIG" --proxy-mode iptables --oom-score-adj 0 \
    --hostname-override "$NODE" --cluster-cidr "$POD_CIDR" --conntrack-max-per-core 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 --iptables-localhost-nodeports=false \
    --metrics-bind-address "127.0.0.1:$PROXY_METRICS_PORT" --healthz-bind-address "127.0.0.1:$PROXY_HEALTHZ_PORT"
  running kubelet || start kubelet "$BIN/kubelet" --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$PKI/node.kubeconfig" --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" \
    --hostname-override "$NODE" --node-ip "$GATEWAY"
  wait_for "node $NODE" 120 "$BIN/kubectl" wait --for condition=Ready "node/$NODE" --timeout 1s
}

# The cluster's own images (the pod sandbox, CoreDNS, KEDA): each a static binary alone in an image, run as
# nobody (KEDA's pods must run as non-root and say so).
load_cluster_images() {
  [[ $("${CTR[@]}" images ls -q) == *rubricd-local/keda-adapter:k8s* ]] && return
  local dir image; dir=$(mktemp -d)
  for image in pause coredns keda keda-adapter; do
    mkdir -p "$dir/$image" && cp "$BIN/$image" "$dir/$image/"
    tar -C "$dir/$image" -c "$image" | docker import -c "ENTRYPOINT [\"/$image\"]" -c "USER 65534" - \
      "rubricd-local/$image:k8s" >/dev/null
    docker save "rubricd-local/$image:k8s" | "${CTR[@]}" images import - >/dev/null
    docker rmi "rubricd-local/$image:k8s" >/dev/null
  done
  rm -rf "$dir"
}

install_addons() {
  "$BIN/kubectl" apply -f "$REPO/deploy/local/cluster/coredns.yaml" >/dev/null
  local keda=$STATE/keda
  rm -rf "$keda" && mkdir -p "$keda" && cp -r "$BIN/keda-config" "$keda/config"
  cat >"$keda/kustomization.yaml" <<EOF
resources: [config/minimal]
images:
  - {name: ghcr.io/kedacore/keda, newName: rubricd-local/keda, newTag: k8s}
  - {name: ghcr.io/kedacore/keda-metrics-apiserver, newName: rubricd-local/keda-adapter, newTag: k8s}
patches:
  - target: {kind: Deployment}
    patch: |-
      - {op: replace, path: /spec/template/spec/containers/0/imagePullPolicy, value: IfNotPresent}
EOF
  "$BIN/kubectl" apply --server-side -k "$keda" >/dev/null
  "$BIN/kubectl" -n kube-system rollout status deployment/coredns --timeout 180s >/dev/null
  "$BIN/kubectl" -n keda rollout status deployment/keda-operator --timeout 300s >/dev/null
  "$BIN/kubectl" -n keda rollout status deployment/keda-metrics-apiserver --timeout 300s >/dev/null
  wait_for "KEDA's external metrics API" 180 "$BIN/kubectl" get --raw /apis/external.metrics.k8s.io/v1beta1
}

cmd_up() {
  [[ $(id -u) == 0 ]] || die "a cluster on the host needs root (kubelet, mounts, iptables)"
  [[ -x $BIN/keda ]] || die "not built: $0 build (or make k8s-cluster)"
  local tool
  for tool in containerd runc ctr iptables openssl curl; do
    command -v $tool >/dev/null || die "no $tool: install it with: sudo make k8s-deps"
  done
  [[ -x $CNI_BIN/bridge ]] || die "no CNI plugins in $CNI_BIN: install them with: sudo make k8s-deps"
  # `down` removes every KUBE-* and CNI-* chain: refuse a host where another Kubernetes or CNI user made some.
  if [[ ! -d $STATE ]] && [[ -n $(iptables_chains) ]]; then
    die "this host has KUBE-*/CNI-* iptables chains of another cluster: $(iptables_chains | tr '\n' ' ')"
  fi
  "$REPO/deploy/docker/images.sh" daemon >/dev/null
  local t0=$SECONDS
  mkdir -p "$STATE" "$RUN" "$LOGS"
  save_kernel_settings; make_pki; make_bridge; write_configs
  start_control_plane; say "control plane up ($((SECONDS - t0)) s)"
  start_node; say "node $NODE Ready ($((SECONDS - t0)) s)"
  install_addons; say "CoreDNS and KEDA ready ($((SECONDS - t0)) s)"
  local crd
  for crd in "$@"; do "$BIN/kubectl" apply --server-side -f "$crd" >/dev/null; done
  cmd_env
}

cmd_load() {
  local image
  if (($# == 0)); then
    local built; built=$("$REPO/deploy/docker/images.sh" env)
    set -- $(tr ' ' '\n' <<<"$built" | sed -n 's/^RUBRICD_\(REDIS_\|WEAVIATE_\|\)IMAGE=//p')
  fi
  for image in "$@"; do docker save "$image" | "${CTR[@]}" images import - >/dev/null; say "loaded $image"; done
}

cmd_env() {
  echo "export KUBECONFIG=$KUBECONFIG"
  echo "export PATH=$BIN:\$PATH"
}

# --- down --------------------------------------------------------------------------------------------------------

stop() {  # NAME: its process group, TERM then KILL
  [[ -f $RUN/$1.pid ]] || return 0
  local pid; pid=$(cat "$RUN/$1.pid")
  rm -f "$RUN/$1.pid"
  # A pid file outlives a reboot: only a process started with the cluster's state in its arguments is ours.
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$STATE"* ]] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null || true
}

# The chains the cluster's kubelet and kube-proxy (KUBE-*, IPv4 and IPv6) and CNI plugins (CNI-*) made, and the
# rules that jump to them: "iptables|ip6tables TABLE CHAIN" a line.
iptables_chains() {
  local tool table
  for tool in iptables ip6tables; do
    for table in filter nat mangle; do
      $tool -t $table -S 2>/dev/null | sed -n "s/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/$tool $table \1/p"
    done
  done
}
clean_iptables() {
  local tool table rule chain
  for tool in iptables ip6tables; do
    for table in filter nat mangle; do
      while read -r rule; do
        eval "$tool -t $table ${rule/#-A/-D}" 2>/dev/null || true
      done < <($tool -t $table -S 2>/dev/null | grep -E -- '-j (KUBE|CNI)-')
    done
  done
  while read -r tool table chain; do $tool -t "$table" -F "$chain" 2>/dev/null || true; done < <(iptables_chains)
  while read -r tool table chain; do $tool -t "$table" -X "$chain" 2>/dev/null || true; done < <(iptables_chains)
}

cmd_down() {
  [[ -d $STATE || -d $RUN ]] || { say "no cluster here"; cmd_leftovers; return; }
  # The pods first, through kubelet, so each leaves the way it came (CNI DEL: its address, veth and rules).
  if running kubelet && "$BIN/kubectl" get --raw /readyz >/dev/null 2>&1; then
    stop kube-controller-manager; stop kube-scheduler
    "$BIN/kubectl" delete pods --all --all-namespaces --grace-period 1 --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 120); do
      compgen -G "$STATE/cni/networks/rubricd-k8s/[0-9]*" >/dev/null || break; sleep 0.5
    done
  fi
  stop kubelet; stop kube-controller-manager; stop kube-scheduler; stop kube-proxy
  if running containerd; then
    local id
    for id in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -a -s SIGKILL "$id" 2>/dev/null || true; done
    sleep 1
    for id in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks rm -f "$id" >/dev/null 2>&1 || true; done
  fi
  stop containerd; stop kube-apiserver; stop etcd
  # Shims containerd did not stop (each leads its own session); their containers go with them.
  local pid
  for pid in $(pgrep -f "containerd-shim.*-address $RUN/containerd.sock" || true); do kill -KILL -- "-$pid" 2>/dev/null || true; done
  # What a pod stopped without kubelet leaves: mounts, network namespaces, rules, the bridge, cgroups.
  local mount ns
  for mount in $(grep -oE " ($STATE|$RUN)[^ ]*" /proc/self/mountinfo | sort -ru); do umount -l "$mount" 2>/dev/null || true; done
  for ns in $(ip netns list 2>/dev/null | grep -o '^cni-[0-9a-f-]*'); do ip netns delete "$ns" 2>/dev/null || true; done
  if [[ -x $BIN/kube-proxy ]]; then "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  clean_iptables
  ip link delete "$BRIDGE" 2>/dev/null || true
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
  restore_kernel_settings
  # containerd 1.6 puts its shims' sockets under /run/containerd/s whatever its state directory (so does Docker's):
  # removed, once empty, only where the cluster made it.
  if [[ -f $STATE/made-run-containerd ]]; then find /run/containerd -depth -type d -empty -delete 2>/dev/null || true; fi
  rm -rf --one-file-system "$STATE" "$RUN" "$LOCAL_STORAGE"
  say "down"
  cmd_leftovers
}

# What of the cluster is still on this machine: nothing, or each thing on a line (and exit 1).
cmd_leftovers() {
  local left=() pid exe args mount ns chain
  for pid in /proc/[0-9]*; do
    exe=$(readlink "$pid/exe" 2>/dev/null) || continue
    args=$(tr '\0' ' ' <"$pid/cmdline" 2>/dev/null) || continue
    if [[ $exe == "$BIN"/* ]] || [[ $exe == */containerd* && ($args == *"$STATE"* || $args == *"$RUN"*) ]]; then
      left+=("process ${pid#/proc/} $exe")
    fi
  done
  while read -r mount; do left+=("mount $mount"); done < <(grep -oE " ($STATE|$RUN)[^ ]*" /proc/self/mountinfo | sort -u)
  while read -r ns; do left+=("netns $ns"); done < <(ip netns list 2>/dev/null | grep -o '^cni-[0-9a-f-]*')
  while read -r chain; do left+=("$chain"); done < <(iptables_chains)
  if ip link show "$BRIDGE" >/dev/null 2>&1; then left+=("bridge $BRIDGE"); fi
  while read -r mount; do left+=("cgroup $mount"); done < <(compgen -G "/sys/fs/cgroup/*/kubepods")
  for mount in "$STATE" "$RUN" "$LOCAL_STORAGE"; do [[ ! -e $mount ]] || left+=("directory $mount"); done
  if ((${#left[@]} == 0)); then echo "cluster: nothing of the cluster left"; return; fi
  printf 'left: %s\n' "${left[@]}"
  return 1
}

case ${1:-} in
  build) cmd_build ;;
  up) shift; cmd_up "$@" ;;
  load) shift; cmd_load "$@" ;;
  down) cmd_down ;;
  leftovers) cmd_leftovers ;;
  env) cmd_env ;;
  *) die "usage: $0 build|up|load IMAGE...|down|leftovers|env" ;;
esac
