#!/usr/bin/env bash
# Static checks of the Helm chart, no cluster needed: helm lint --strict, renders of the default
# values, of watchNamespace, of the admission guard off, of an existing ServiceAccount and of the
# monitoring objects with assertions on the objects (render_checks.py), `promtool test rules` on
# the rendered alerts (alerts_test.yaml; prometheus-build.sh builds promtool once and caches it), values
# the schema or the templates must refuse, the rendered CRD against crds/leadergroup.yaml, and
# every value set rendered for the oldest and the newest supported Kubernetes minor validated by
# kubeconform against that minor's own schemas (schemas.sh) and scored by kube-score (kubetools.sh
# builds both once). Exits non-zero when any check fails, after running all of them.
#
# Env: LEADERGROUP_CRD  the CRD the chart must render (default: crds/leadergroup.yaml).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
chart=$root/charts/leadergroup-operator
crd_source=${LEADERGROUP_CRD:-$root/crds/leadergroup.yaml}

bin=$("$root/controlplane/build.sh") || { echo "static.sh: controlplane/build.sh failed" >&2; exit 2; }
bin_version=$("$bin/kube-apiserver" --version | cut -d' ' -f2)
helm=$bin/helm
promtool=$("$here/prometheus-build.sh" promtool) || { echo "static.sh: charts/tests/prometheus-build.sh promtool failed" >&2; exit 2; }
kubetools=$("$here/kubetools.sh") || { echo "static.sh: charts/tests/kubetools.sh failed" >&2; exit 2; }
oldest_bin=$("$root/controlplane/build-oldest.sh") || { echo "static.sh: controlplane/build-oldest.sh failed" >&2; exit 2; }
python3 -c 'import yaml' 2>/dev/null || { echo "static.sh: needs python3 with PyYAML" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }

# render NAME ARGS...: helm template into $tmp/NAME.yaml (release lg, namespace ops).
render() {
  local name=$1; shift
  if "$helm" template lg "$chart" --namespace ops "$@" >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then
    return 0
  fi
  bad "helm template ($name $*) failed:"; sed 's/^/     /' "$tmp/$name.err"; return 1
}

# assert CHECK RENDER ARGS...: render_checks.py on a render.
assert() {
  local check=$1 name=$2; shift 2
  if python3 "$here/render_checks.py" "$check" "$tmp/$name.yaml" "$@" >"$tmp/$check.out" 2>&1; then
    ok "$check: rendered objects ($name)"
  else
    bad "$check: rendered objects ($name)"; cat "$tmp/$check.out"
  fi
}

# refuse WHAT MESSAGE ARGS...: helm template must fail, naming the problem.
refuse() {
  local what=$1 message=$2; shift 2
  if "$helm" template lg "$chart" --namespace ops "$@" >/dev/null 2>"$tmp/refuse.err"; then
    bad "refuse $what: helm template $* succeeded"
  elif ! grep -qF -- "$message" "$tmp/refuse.err"; then
    bad "refuse $what: the error does not say '$message':"; sed 's/^/     /' "$tmp/refuse.err"
  else
    ok "refuse $what ($*)"
  fi
}

# 1. Lint, strict (warnings fail), for both RBAC modes and without the admission guard.
monitoring="--set prometheusRule.enabled=true --set serviceMonitor.enabled=true --set grafanaDashboard.enabled=true --set metrics.perGroup=false"
plain="--set metrics.secure=false --set serviceMonitor.enabled=true"
for args in "" "--set watchNamespace=team-a" "--set admissionGuard.enabled=false" "$monitoring" "$plain"; do
  # shellcheck disable=SC2086
  if "$helm" lint --strict "$chart" --namespace ops $args >"$tmp/lint.out" 2>&1; then
    ok "helm lint --strict $args"
  else
    bad "helm lint --strict $args"; sed 's/^/     /' "$tmp/lint.out"
  fi
done

# 2. No crds/ folder in the chart (Helm installs that once and never upgrades it; the template does
#    both). That the template is the generated one is `make crd-check`'s job; the renders below
#    check what it produces against the CRD.
[[ -f $crd_source ]] || bad "CRD source $crd_source is missing (run make crds)"
if [[ -e $chart/crds ]]; then bad "the chart has a crds/ folder: Helm would never upgrade it"; else ok "no crds/ folder in the chart"; fi

# 3. Renders and what must be in them.
render default && {
  assert default default
  [[ -f $crd_source ]] && assert crd default "$crd_source" keep
}
render no-keep --set crds.keep=false && [[ -f $crd_source ]] && assert crd no-keep "$crd_source" no-keep
render watch --set watchNamespace=team-a && assert watch-namespace watch team-a
render watch-own --set watchNamespace=ops && assert watch-namespace watch-own ops
# The deprecated list spelling renders exactly what watchNamespace does (NOTES aside).
render watch-deprecated --set 'watchNamespaces={team-a}' && assert watch-namespace watch-deprecated team-a
if [[ -f $tmp/watch.yaml && -f $tmp/watch-deprecated.yaml ]] && cmp -s "$tmp/watch.yaml" "$tmp/watch-deprecated.yaml"; then
  ok "watchNamespaces={team-a} renders the same objects as watchNamespace=team-a"
else
  bad "watchNamespaces={team-a} renders differently from watchNamespace=team-a"
fi
if "$helm" install lg "$chart" --namespace ops --dry-run=client --set 'watchNamespaces={team-a}' 2>&1 | grep -qF "watchNamespaces is deprecated"; then
  ok "NOTES warn that watchNamespaces is deprecated"
else
  bad "NOTES do not warn that watchNamespaces is deprecated"
fi
# The chart README's registry install: the image pulled from there.
render registry --set image.repository=registry.example.com/leadergroup-operator && assert registry-image registry
render single --set replicas=1 --set leaderElection.enabled=false && assert single single
render no-guard --set admissionGuard.enabled=false && [[ -f $tmp/default.yaml ]] && assert no-guard no-guard "$tmp/default.yaml"
render existing-sa --set serviceAccount.create=false --set serviceAccount.name=platform-operator &&
  assert existing-service-account existing-sa platform-operator
cat >"$tmp/custom-values.yaml" <<'YAML'
crds: {enabled: false, keep: true}
image: {repository: registry.example.com/lgo, tag: "", digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
replicas: 3
leaderElection: {enabled: true, leaseDurationSeconds: 30}
concurrency: 128
logFormat: text
logLevel: debug
serviceAccount: {create: true, name: "", annotations: {example.com/role: x}}
podAnnotations: {example.com/scrape: "true"}
podLabels: {team: platform}
nodeSelector: {node-role.example.com/infra: "true"}
tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app.kubernetes.io/name: leadergroup-operator}}
priorityClassName: system-cluster-critical
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
     labelSelector: {matchLabels: {app.kubernetes.io/name: leadergroup-operator}}}
terminationGracePeriodSeconds: 90
extraArgs: ["--identity=$(POD_NAME)"]
extraEnv: [{name: TZ, value: UTC}]
metrics:
  port: 9090
  secure: true
  securePort: 9443
  certSecret: metrics-tls
  readers:
    - {kind: ServiceAccount, name: prometheus-k8s, namespace: monitoring}
    - {kind: Group, name: scrapers}
  perGroup: true
service: {annotations: {example.com/a: b}}
serviceMonitor:
  enabled: true
  interval: 15s
  scrapeTimeout: 5s
  labels: {release: prometheus}
  tlsConfig: {ca: {secret: {name: metrics-tls, key: ca.crt}}, serverName: lg-leadergroup-operator-metrics.ops.svc}
  authorization: {type: Bearer, credentials: {name: prometheus-token, key: token}}
  relabelings: [{action: replace, sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}]
  metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_gc_.*}]
admissionGuard: {enabled: true, namespaceSelector: {matchLabels: {team: platform}}}
YAML
render custom -f "$tmp/custom-values.yaml" && assert custom custom
# What a platform team asks for (issue 52): commonLabels, global.imageRegistry,
# revisionHistoryLimit, extra volumes, the probes' timing and the NetworkPolicy.
cat >"$tmp/platform-values.yaml" <<'YAML'
global: {imageRegistry: registry.example.com:5000/mirror}
commonLabels: {cost-center: platform}
revisionHistoryLimit: 3
metrics: {certSecret: metrics-tls}
extraVolumes: [{name: ca, configMap: {name: corp-ca}}]
extraVolumeMounts: [{name: ca, mountPath: /etc/corp-ca, readOnly: true}]
probes:
  liveness: {initialDelaySeconds: 5, periodSeconds: 20, timeoutSeconds: 3, failureThreshold: 3}
  readiness: {initialDelaySeconds: 0, periodSeconds: 5, timeoutSeconds: 2, failureThreshold: 2, successThreshold: 2}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  egress: [{to: [{ipBlock: {cidr: 10.0.0.1/32}}], ports: [{port: 6443, protocol: TCP}]}]
YAML
render platform -f "$tmp/platform-values.yaml" && assert platform platform
# The monitoring objects (all off by default: check_default lists every kind it renders), and the
# alerts unit-tested by promtool on the rules as rendered.
# shellcheck disable=SC2086
render monitoring $monitoring && {
  assert monitoring monitoring "$tmp/rules.yaml"
  assert readme-names monitoring
  cp "$here/alerts_test.yaml" "$tmp/alerts_test.yaml"
  if "$promtool" check rules "$tmp/rules.yaml" >"$tmp/promtool.out" 2>&1 &&
    "$promtool" test rules "$tmp/alerts_test.yaml" >>"$tmp/promtool.out" 2>&1; then
    ok "promtool check rules and test rules (alerts_test.yaml) on the rendered PrometheusRule"
  else
    bad "promtool on the rendered PrometheusRule:"; sed 's/^/     /' "$tmp/promtool.out"
  fi
}

# metrics.secure=false: today's plain /metrics, scraped in plain HTTP.
# shellcheck disable=SC2086
render plain $plain && assert plain-metrics plain

# NOTES.txt, as `helm install` prints it.
if "$helm" install lg "$chart" --namespace ops --dry-run=client >"$tmp/notes.yaml" 2>&1; then
  assert notes notes
else
  bad "helm install --dry-run=client failed:"; sed 's/^/     /' "$tmp/notes.yaml"
fi

# 4. Every value set above, rendered for each end of the supported range (the chart's kubeVersion:
#    the oldest minor's and the newest's control plane), against that minor's schemas of the
#    built-in kinds (generated from its kube-apiserver's OpenAPI by schemas.sh) and the CRD's own
#    schema: -strict refuses a field the kind does not have. The prometheus-operator kinds
#    (ServiceMonitor, PrometheusRule) have no schema here: their CRDs are not Kubernetes' and are
#    not in the repository; render_checks.py and promtool check those objects.
declare -A value_sets=(
  [default]="" [watch]="--set watchNamespace=team-a" [no-guard]="--set admissionGuard.enabled=false"
  [single]="--set replicas=1 --set leaderElection.enabled=false" [monitoring]="$monitoring"
  [existing-sa]="--set serviceAccount.create=false --set serviceAccount.name=platform-operator"
  [custom]="-f $tmp/custom-values.yaml" [plain]="$plain" [platform]="-f $tmp/platform-values.yaml"
)
mkdir -p "$tmp/crd-schemas"
python3 "$here/json_schemas.py" crd "$crd_source" "$tmp/crd-schemas" 2>"$tmp/crd-schemas.err" ||
  bad "the CRD's JSON schema:$(cat "$tmp/crd-schemas.err")"
for control_plane in "$oldest_bin" "$bin"; do
  version=$("$control_plane/kube-apiserver" --version | cut -d' ' -f2)
  if ! schemas=$("$here/schemas.sh" "$control_plane" 2>"$tmp/schemas.err"); then
    bad "the JSON schemas of $version:"; sed 's/^/     /' "$tmp/schemas.err"; continue
  fi
  for set in "${!value_sets[@]}"; do
    # shellcheck disable=SC2086 # the value set's flags, split as written
    render "kc-$version-$set" --kube-version "${version#v}" ${value_sets[$set]} || continue
    if "$kubetools/kubeconform" -strict -summary -skip ServiceMonitor,PrometheusRule \
      -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
      -schema-location "$tmp/crd-schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
      "$tmp/kc-$version-$set.yaml" >"$tmp/kubeconform.out" 2>&1; then
      ok "kubeconform $version ($set): $(grep -o 'Valid: [0-9]*' "$tmp/kubeconform.out")"
    else
      bad "kubeconform $version ($set):"; sed 's/^/     /' "$tmp/kubeconform.out"
    fi
  done
done

# 5. kube-score on every value set (the newest minor's renders). The findings the chart keeps are
#    ignored here and justified in the chart's README ("kube-score"): no CPU limit (throttling
#    would slow the handovers of a burst), no ephemeral-storage request or limit (the operator
#    writes nothing but its log), no NetworkPolicy (its peers, the API server and the scraper, are
#    the cluster's to name), imagePullPolicy IfNotPresent (a pinned tag or digest, and clusters
#    that load the image without a registry).
for set in "${!value_sets[@]}"; do
  [[ -f $tmp/kc-$bin_version-$set.yaml ]] || continue
  if "$kubetools/kube-score" score --output-format ci --ignore-container-cpu-limit \
    --ignore-test container-ephemeral-storage-request-and-limit --ignore-test pod-networkpolicy \
    --ignore-test container-image-pull-policy "$tmp/kc-$bin_version-$set.yaml" >"$tmp/kube-score.out" 2>&1; then
    ok "kube-score ($set): no critical finding, $(grep -c '^\[WARNING\]' "$tmp/kube-score.out") warning(s)"
  else
    bad "kube-score ($set):"; grep -v '^\[OK\]\|^\[SKIPPED\]' "$tmp/kube-score.out" | sed 's/^/     /'
  fi
done

# 6. Values that must be refused, each with a message that names the problem.
refuse "a mistyped top-level key" "additional properties 'replica' not allowed" --set replica=3
refuse "a mistyped nested key" "additional properties 'tagg' not allowed" --set image.tagg=v1
refuse "a mistyped securityContext key" "additional properties 'readOnlyRootFileSystem' not allowed" --set securityContext.readOnlyRootFileSystem=true
refuse "a string for an integer" "/replicas" --set replicas=two
refuse "an extra argument that is no flag" "/extraArgs/0" --set 'extraArgs={identity}'
refuse "a privileged metrics port" "/metrics/port" --set metrics.port=80
refuse "a privileged secure metrics port" "/metrics/securePort" --set metrics.securePort=443
refuse "a string for metrics.secure" "/metrics/secure" --set metrics.secure=maybe
refuse "the deprecated bearerTokenFile" "additional properties 'bearerTokenFile' not allowed" --set serviceMonitor.bearerTokenFile=/t
refuse "an authorization without credentials" "/serviceMonitor/authorization" --set serviceMonitor.authorization.type=Bearer
refuse "a relabeling of an unknown action" "/serviceMonitor/relabelings/0/action" --set 'serviceMonitor.relabelings[0].action=rename'
refuse "an unknown key of a metric relabeling" "additional properties 'source_labels' not allowed" --set 'serviceMonitor.metricRelabelings[0].source_labels[0]=a'
refuse "an unknown image pull policy" "/image/pullPolicy" --set image.pullPolicy=Sometimes
refuse "commonLabels taking the selector's label" "commonLabels sets app.kubernetes.io/instance" --set 'commonLabels.app\.kubernetes\.io/instance=x'
refuse "commonLabels carrying a mark" "commonLabels sets label leadergroup.io/role" --set 'commonLabels.leadergroup\.io/role=leader'
refuse "a probe's path" "additional properties 'path' not allowed" --set probes.liveness.path=/x
refuse "a probe period of zero" "/probes/readiness/periodSeconds" --set probes.readiness.periodSeconds=0
refuse "a negative revisionHistoryLimit" "/revisionHistoryLimit" --set revisionHistoryLimit=-1
refuse "a mount without its path" "/extraVolumeMounts/0" --set 'extraVolumeMounts[0].name=ca'
refuse "a NetworkPolicy peer of an unknown kind" "additional properties 'namespace' not allowed" --set 'networkPolicy.metricsFrom[0].namespace=monitoring'
refuse "a registry that is no registry" "/global/imageRegistry" --set 'global.imageRegistry=Not A Registry'
refuse "an unknown key of the scrape's tlsConfig" "additional properties 'insecure' not allowed" --set serviceMonitor.tlsConfig.insecure=true
refuse "a metrics reader of an unknown kind" "/metrics/readers/0/kind" --set 'metrics.readers[0].kind=Pod' --set 'metrics.readers[0].name=x'
refuse "a ServiceAccount reader without its namespace" "a ServiceAccount needs its namespace" --set 'metrics.readers[0].kind=ServiceAccount' --set 'metrics.readers[0].name=prom'
refuse "a concurrency of zero" "/concurrency" --set concurrency=0
refuse "an unknown logFormat" "/logFormat" --set logFormat=yaml
refuse "a lease duration out of range" "/leaderElection/leaseDurationSeconds" --set leaderElection.leaseDurationSeconds=0
refuse "a namespace that is no DNS label" "/watchNamespace" --set watchNamespace=Team_A
refuse "a listed namespace that is no DNS label (deprecated list)" "/watchNamespaces/0" --set 'watchNamespaces={Team_A}'
refuse "the two spellings disagreeing" "set watchNamespace only" --set watchNamespace=team-a --set 'watchNamespaces={team-b}'
refuse "two watched namespaces" "one operator process watches one namespace" --set 'watchNamespaces={team-a,team-b}'
refuse "replicas without leader election" "leaderElection.enabled is false" --set leaderElection.enabled=false
refuse "a Kubernetes older than kubeVersion" "kubeVersion" --kube-version 1.32.0
refuse "a string for admissionGuard.enabled" "/admissionGuard/enabled" --set admissionGuard.enabled=maybe
refuse "a namespace list for the guard's selector" "additional properties 'matchNames' not allowed" --set 'admissionGuard.namespaceSelector.matchNames={a}'
refuse "an unknown selector operator" "/admissionGuard/namespaceSelector/matchExpressions/0/operator" --set 'admissionGuard.namespaceSelector.matchExpressions[0].key=team' --set 'admissionGuard.namespaceSelector.matchExpressions[0].operator=Is'
# The operator's own pods carrying a mark: the guard would refuse them (and a group could take
# them for its own).
refuse "a string for metrics.perGroup" "/metrics/perGroup" --set metrics.perGroup=maybe
refuse "a flapping threshold of zero" "/prometheusRule/flappingWarning" --set prometheusRule.flappingWarning=0
refuse "a mark in podLabels" "podLabels sets label leadergroup.io/role" --set 'podLabels.leadergroup\.io/role=leader'
refuse "a mark in podAnnotations" "podAnnotations sets annotation leadergroup.io/epoch" --set-string 'podAnnotations.leadergroup\.io/epoch=1'

echo
if ((failed)); then echo "static.sh: $failed check(s) failed"; exit 1; fi
echo "static.sh: all chart checks passed"
