#!/usr/bin/env python3
"""Assertions on `helm template` output of the leadergroup-operator chart.

Usage: render_checks.py CHECK RENDERED.yaml [ARGS...]; exits 1 with one line per failed assertion.
Called by static.sh, which renders the chart with the values each CHECK expects.
"""
import json
import os
import re
import sys

import yaml

RELEASE, NAMESPACE = "lg", "ops"
GUARD_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", *GUARD_KINDS}
# The operator's marks (src/crd.rs): what the admission guard keeps to the operator.
MARKS = {("label", "leadergroup.io/role"), ("annotation", "leadergroup.io/epoch"), ("annotation", "leadergroup.io/group")}
# What the guard judges, as (apiGroup, resource): pods (their status and bindings too: both can
# change a pod's metadata) and every built-in workload with a pod template.
GUARDED = {("", "pods"), ("", "pods/status"), ("", "pods/binding"), ("", "replicationcontrollers"),
           *(("apps", r) for r in ["deployments", "statefulsets", "replicasets", "daemonsets"]),
           ("batch", "jobs"), ("batch", "cronjobs")}
# The operator's command line (docs/LAYOUT.md): a flag outside this list is a typo.
KNOWN_FLAGS = {"--kubeconfig", "--namespace", "--log-format", "--http-addr", "--concurrency", "--leader-elect",
               "--leader-elect-namespace", "--leader-elect-lease-name",
               "--leader-elect-lease-duration", "--identity", "--per-group-metrics",
               "--node-monitor-grace-period", "--metrics-secure-addr", "--metrics-cert-dir"}
# Exactly what the operator may do on watched namespaces, as (apiGroup, resource, verb).
OPERATOR_RULES = {
    *(("leadergroup.io", "leadergroups", v) for v in ["get", "list", "watch", "update", "patch"]),
    *(("leadergroup.io", "leadergroups/status", v) for v in ["get", "update", "patch"]),
    ("leadergroup.io", "leadergroups/finalizers", "update"),
    *(("", "pods", v) for v in ["get", "list", "watch", "patch"]),
    *(("coordination.k8s.io", "leases", v)
      for v in ["get", "list", "watch", "create", "update", "patch", "delete"]),
    *((g, "events", v) for g in ["", "events.k8s.io"] for v in ["create", "patch"]),
    # The leader's Service (spec.service) and its EndpointSlice: watched, written whole (no
    # patch), read afresh after a 409.
    *(("", "services", v) for v in ["get", "list", "watch", "create", "update", "delete"]),
    *(("discovery.k8s.io", "endpointslices", v)
      for v in ["get", "list", "watch", "create", "update", "delete"]),
}
# The secure /metrics (metrics.secure): what the operator asks the API server about a scraper's
# token, cluster-wide in every RBAC mode (a Role cannot grant these cluster-scoped reviews).
METRICS_AUTH_RULES = {("authentication.k8s.io", "tokenreviews", "create", ()),
                      ("authorization.k8s.io", "subjectaccessreviews", "create", ())}
FULLNAME = f"{RELEASE}-leadergroup-operator"
METRICS_AUTH, METRICS_READER = f"{FULLNAME}-metrics-auth.{NAMESPACE}", f"{FULLNAME}-metrics-reader.{NAMESPACE}"
# The ClusterRoles of the secure /metrics, beside the operator's own.
METRICS_ROLES = {METRICS_AUTH, METRICS_READER}

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(objs, kind, name=None, namespace=None):
    return [o for o in objs if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)
            and (namespace is None or o["metadata"].get("namespace") == namespace)]


def one(objs, kind, **kw):
    found = find(objs, kind, **kw)
    check(len(found) == 1, f"expected exactly one {kind} {kw or ''}, found {len(found)}")
    return found[0] if found else None


def flatten(rules):
    out = set()
    for r in rules:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r.get("verbs", []):
                    out.add((g, res, v, tuple(r.get("resourceNames", []))))
    return out


def chart_meta():
    import os
    with open(os.path.join(os.path.dirname(__file__), "..", "leadergroup-operator", "Chart.yaml")) as f:
        return yaml.safe_load(f)


def check_common(objs):
    """Every object: standard labels, release namespace, unique identity, no wildcard RBAC."""
    meta = chart_meta()
    want = {
        "app.kubernetes.io/name": "leadergroup-operator",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/version": str(meta["appVersion"]),
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": f"leadergroup-operator-{meta['version']}",
    }
    seen = set()
    for o in objs:
        md = o["metadata"]
        ident = (o["kind"], md.get("namespace"), md["name"])
        check(ident not in seen, f"duplicate object {ident}")
        seen.add(ident)
        labels = md.get("labels") or {}
        for k, v in want.items():
            check(labels.get(k) == v, f"{o['kind']}/{md['name']}: label {k}={labels.get(k)!r}, want {v!r}")
        if o["kind"] in CLUSTER_SCOPED:
            check("namespace" not in md, f"{o['kind']}/{md['name']} is cluster-scoped but has a namespace")
        elif o["kind"] not in ("Role", "RoleBinding"):  # Roles may sit in watched namespaces
            check(md.get("namespace") == NAMESPACE,
                  f"{o['kind']}/{md['name']}: namespace {md.get('namespace')!r}, want the release namespace {NAMESPACE!r}")
        if o["kind"] in ("Role", "ClusterRole"):
            for r in o.get("rules", []):
                for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                    check("*" not in r.get(field, []), f"{o['kind']}/{md['name']}: wildcard in {field}")
                check("secrets" not in r.get("resources", []), f"{o['kind']}/{md['name']}: grants secrets")
                # Only the scrapers' role grants a URL: get on /metrics, nothing else.
                if md["name"] == METRICS_READER and o["kind"] == "ClusterRole":
                    check(r == {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                          f"{o['kind']}/{md['name']}: rule {r}, want get on /metrics alone")
                else:
                    check("nonResourceURLs" not in r, f"{o['kind']}/{md['name']}: grants nonResourceURLs")


def deployment_parts(objs):
    dep = one(objs, "Deployment", namespace=NAMESPACE)
    pod = dep["spec"]["template"]["spec"]
    check(len(pod["containers"]) == 1, "the Deployment must have exactly one container")
    ctr = pod["containers"][0]
    args = ctr.get("args", [])
    for a in args:
        check(a.split("=", 1)[0] in KNOWN_FLAGS, f"operator arg {a!r} is not in the command-line contract")
    return dep, pod, ctr, args


def image_build_ref(name):
    """The reference images/build.sh gives image `name` (operator, agent), from the sources it reads:
    the chart's image.repository and appVersion for the operator, the workspace's version for the
    agent; stored as docker.io/library/NAME:TAG, what the kubelet makes of a bare NAME:TAG."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "images", "build.sh")) as f:
        build = f.read()
    if name == "operator":
        check('repository=$(sed -n \'s/^  repository: *//p\' "$repo/charts/leadergroup-operator/values.yaml"' in build
              and 'library_ref "$repository" "$version"' in build,
              "images/build.sh no longer names the operator after the chart's image.repository and appVersion")
        with open(os.path.join(root, "charts", "leadergroup-operator", "values.yaml")) as f:
            repository = yaml.safe_load(f)["image"]["repository"]
        return f"docker.io/library/{repository}:{chart_meta()['appVersion']}"
    raise ValueError(name)


def check_platform(objs):
    """The values a platform team sets: commonLabels on every object (never in the selector),
    global.imageRegistry before the repository, revisionHistoryLimit, extra volumes and mounts
    beside the chart's, the probes' timing, and the NetworkPolicy: ingress to the probes' port from
    any peer and to the secure metrics port from metricsFrom alone, egress as given."""
    check_common(objs)
    for o in objs:
        labels = o["metadata"].get("labels") or {}
        check(labels.get("cost-center") == "platform", f"{o['kind']}/{o['metadata']['name']}: commonLabels missing")
    dep, pod, ctr, _ = deployment_parts(objs)
    check("cost-center" not in dep["spec"]["selector"]["matchLabels"], "commonLabels must stay out of the selector")
    check(dep["spec"]["template"]["metadata"]["labels"].get("cost-center") == "platform", "commonLabels on the pods")
    want = f"registry.example.com:5000/mirror/leadergroup-operator:{chart_meta()['appVersion']}"
    check(ctr["image"] == want and ctr.get("imagePullPolicy") == "IfNotPresent",
          f"global.imageRegistry: {ctr['image']} {ctr.get('imagePullPolicy')}, want {want} IfNotPresent")
    check(dep["spec"].get("revisionHistoryLimit") == 3, "revisionHistoryLimit")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
    check(set(volumes) == {"metrics-tls", "ca"} and volumes["ca"].get("configMap") == {"name": "corp-ca"},
          f"extraVolumes beside metrics-tls: {volumes}")
    check(set(mounts) == {"metrics-tls", "ca"} and mounts["ca"] == {"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": True},
          f"extraVolumeMounts beside metrics-tls: {mounts}")
    check(ctr["livenessProbe"]["periodSeconds"] == 20 and ctr["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"},
          f"probes.liveness: {ctr['livenessProbe']}")
    check(ctr["readinessProbe"].get("successThreshold") == 2 and ctr["readinessProbe"]["httpGet"]["path"] == "/readyz",
          f"probes.readiness: {ctr['readinessProbe']}")
    policy = one(objs, "NetworkPolicy", namespace=NAMESPACE)
    if policy:
        spec = policy["spec"]
        check(spec["podSelector"] == {"matchLabels": dep["spec"]["selector"]["matchLabels"]}, f"podSelector {spec['podSelector']}")
        check(spec["policyTypes"] == ["Ingress", "Egress"], f"policyTypes {spec['policyTypes']}")
        ingress = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in spec["ingress"]}
        check(ingress == {("http",): None, ("https-metrics",): PLATFORM_METRICS_FROM}, f"ingress {spec['ingress']}")
        check(spec.get("egress") == PLATFORM_EGRESS, f"egress {spec.get('egress')}")


# networkPolicy of static.sh's platform values.
PLATFORM_METRICS_FROM = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
PLATFORM_EGRESS = [{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}]


def check_registry_image(objs):
    """image.repository set to a registry's name (the chart README's registry install): pulled
    IfNotPresent, at the appVersion tag."""
    check_common(objs)
    _, _, ctr, _ = deployment_parts(objs)
    want = f"registry.example.com/leadergroup-operator:{chart_meta()['appVersion']}"
    check(ctr["image"] == want, f"image {ctr['image']}, want {want}")
    check(ctr.get("imagePullPolicy") == "IfNotPresent", f"imagePullPolicy {ctr.get('imagePullPolicy')}, want IfNotPresent from a registry")


def arg(args, flag):
    vals = [a.split("=", 1)[1] if "=" in a else True for a in args if a.split("=", 1)[0] == flag]
    check(len(vals) <= 1, f"{flag} given {len(vals)} times")
    return vals[0] if vals else None


def check_binding(objs, kind, name, namespace, role_kind, role_name, sa):
    b = one(objs, kind, name=name, namespace=namespace)
    if not b:
        return
    check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
          f"{kind}/{name}: roleRef {b['roleRef']}")
    check(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
          f"{kind}/{name}: subjects {b['subjects']}")


def check_leader_election_rbac(objs, sa, lease):
    role = [r for r in find(objs, "Role", namespace=NAMESPACE) if r["metadata"]["name"].endswith("-leader-election")]
    if not check(len(role) == 1, "expected one leader-election Role in the release namespace"):
        return
    role = role[0]
    want = {("coordination.k8s.io", "leases", "create", ())} | {
        ("coordination.k8s.io", "leases", v, (lease,)) for v in ["get", "watch", "update", "patch"]}
    got = flatten(role["rules"])
    check(got == want, f"leader-election Role: extra {sorted(got - want)}, missing {sorted(want - got)}")
    check_binding(objs, "RoleBinding", role["metadata"]["name"], NAMESPACE, "Role", role["metadata"]["name"], sa)


def check_default(objs):
    check_common(objs)
    kinds = sorted(o["kind"] for o in objs)
    want = sorted(["CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                   "Role", "RoleBinding", "Deployment", "PodDisruptionBudget", "Service", *GUARD_KINDS, *GUARD_KINDS,
                   "ClusterRole", "ClusterRoleBinding", "ClusterRole"])
    check(kinds == want, f"objects {kinds}, want {want}")
    sa = one(objs, "ServiceAccount", namespace=NAMESPACE)
    sa_name = sa["metadata"]["name"] if sa else None

    # RBAC: cluster-wide, exactly the operator's rules.
    cr = one(objs, "ClusterRole", name=FULLNAME)
    if cr:
        got = {(g, r, v) for g, r, v, names in flatten(cr["rules"])}
        check(all(not names for *_, names in flatten(cr["rules"])), "ClusterRole rules must not be limited by name")
        check(got == OPERATOR_RULES,
              f"ClusterRole: extra {sorted(got - OPERATOR_RULES)}, missing {sorted(OPERATOR_RULES - got)}")
        check_binding(objs, "ClusterRoleBinding", cr["metadata"]["name"], None, "ClusterRole", cr["metadata"]["name"], sa_name)

    dep, pod, ctr, args = deployment_parts(objs)
    spec = dep["spec"]
    check(spec["replicas"] == 2, f"replicas {spec['replicas']}, want 2")
    sel = spec["selector"]["matchLabels"]
    tmpl_labels = spec["template"]["metadata"]["labels"]
    check(all(tmpl_labels.get(k) == v for k, v in sel.items()), "Deployment selector does not match its pod labels")
    check(set(sel) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"},
          f"selector {sel} must be name+instance only (immutable; version must not be in it)")
    check(pod.get("serviceAccountName") == sa_name, f"serviceAccountName {pod.get('serviceAccountName')} != {sa_name}")
    check(not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), "pod uses host namespaces")
    psc = pod.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, "pod runAsNonRoot must be true")
    check(psc.get("runAsUser") == 65532, f"pod runAsUser {psc.get('runAsUser')}, want 65532")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "pod seccompProfile must be RuntimeDefault")
    csc = ctr.get("securityContext", {})
    check(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem must be true")
    check(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation must be false")
    check(csc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities must drop ALL")
    check(not csc.get("capabilities", {}).get("add"), "capabilities must add nothing")
    check(csc.get("privileged") is not True, "container must not be privileged")
    meta = chart_meta()
    check(ctr["image"] == f"leadergroup-operator:{meta['appVersion']}", f"image {ctr['image']}, want tag = appVersion")
    # Nothing is published: the default is the image `images/build.sh operator` builds and the
    # install loads onto the nodes, never pulled (a missing one says ErrImageNeverPull, not a
    # failed pull from Docker Hub).
    check(ctr.get("imagePullPolicy") == "Never", f"imagePullPolicy {ctr.get('imagePullPolicy')}, want Never for the loaded image")
    check(image_build_ref("operator") == f"docker.io/library/{ctr['image']}",
          f"images/build.sh names the operator {image_build_ref('operator')}, the chart runs {ctr['image']}")
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    check(ports == {"http": 8080, "https-metrics": 8443}, f"container ports {ports}, want http: 8080, https-metrics: 8443")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = ctr.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") in ("http", 8080), f"{probe} {get}, want {path} on http")
    check(ctr.get("resources", {}).get("requests") and ctr.get("resources", {}).get("limits", {}).get("memory"),
          "resources must set requests and a memory limit")
    env = {e["name"]: e for e in ctr.get("env", [])}
    for name, field in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")):
        got = env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        check(got == field, f"env {name} from {got}, want the downward API {field}")
    check(arg(args, "--http-addr") == "0.0.0.0:8080", "--http-addr must be 0.0.0.0:8080 (the probes' port)")
    check(pod.get("terminationGracePeriodSeconds") == 30,
          f"terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')}, want 30")
    check("topologySpreadConstraints" not in pod, "no topologySpreadConstraints by default")
    check(spec.get("revisionHistoryLimit") == 10, f"revisionHistoryLimit {spec.get('revisionHistoryLimit')}, want 10")
    timing = lambda probe: {k: v for k, v in ctr.get(probe, {}).items() if k != "httpGet"}
    check(timing("livenessProbe") == {"initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3},
          f"livenessProbe timing {timing('livenessProbe')}")
    check(timing("readinessProbe") == {"initialDelaySeconds": 0, "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 2},
          f"readinessProbe timing {timing('readinessProbe')}")
    check("volumes" not in pod and "volumeMounts" not in ctr, "no volumes by default")
    check(arg(args, "--log-format") == "json", "--log-format must follow logFormat (json)")
    check(arg(args, "--concurrency") == "64", "--concurrency must follow concurrency (64)")
    check(arg(args, "--per-group-metrics") == "true", "--per-group-metrics must be on by default (metrics.perGroup)")
    check(arg(args, "--node-monitor-grace-period") == "50",
          "--node-monitor-grace-period must follow nodeMonitorGracePeriodSeconds (Kubernetes' default 50)")
    check(arg(args, "--leader-elect") is True, "--leader-elect must be on by default")
    check(arg(args, "--leader-elect-namespace") == NAMESPACE, "--leader-elect-namespace must be the release namespace")
    check(arg(args, "--leader-elect-lease-duration") == "15", "--leader-elect-lease-duration must be 15")
    check(arg(args, "--namespace") is None, "--namespace must be absent without watchNamespaces")
    lease = arg(args, "--leader-elect-lease-name")
    check(bool(lease), "--leader-elect-lease-name must name this release's Lease")
    check(not (lease or "").startswith("leadergroup-"),
          f"--leader-elect-lease-name {lease} has the form of a LeaderGroup's Lease (leadergroup-<group>)")
    check_leader_election_rbac(objs, sa_name, lease)
    check_guard(objs, sa_name, {})

    pdb = one(objs, "PodDisruptionBudget", namespace=NAMESPACE)
    if pdb:
        check(pdb["spec"].get("maxUnavailable") == 1, "PDB maxUnavailable must be 1")
        check(pdb["spec"]["selector"]["matchLabels"] == sel, "PDB selector must be the Deployment's")
    svc = one(objs, "Service", namespace=NAMESPACE)
    if svc:
        check(svc["spec"]["selector"] == sel, "metrics Service selector must be the Deployment's")
    check_secure_metrics(objs, sa_name, 8443)
    crd = one(objs, "CustomResourceDefinition")
    if crd:
        check(crd["metadata"]["name"] == "leadergroups.leadergroup.io", "CRD name")
        check((crd["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep",
              "CRD must carry helm.sh/resource-policy: keep by default (crds.keep)")


def check_secure_metrics(objs, sa_name, port, cert_secret=None, readers=None):
    """metrics.secure (the default): /metrics over TLS on `port` (--metrics-secure-addr, the
    container's https-metrics, the Service's only port), the probes on http; the operator may
    create TokenReviews and SubjectAccessReviews (a ClusterRole of its own, bound to it); the
    scrapers' ClusterRole may get /metrics alone, bound to `readers` only when some are given."""
    dep, pod, ctr, args = deployment_parts(objs)
    check(arg(args, "--metrics-secure-addr") == f"0.0.0.0:{port}", f"--metrics-secure-addr must be 0.0.0.0:{port}: {args}")
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    check(ports.get("https-metrics") == port, f"container ports {ports}, want https-metrics: {port}")
    for probe in ("livenessProbe", "readinessProbe"):
        check(ctr.get(probe, {}).get("httpGet", {}).get("port") == "http", f"{probe} must stay on the plain port")
    svc = one(objs, "Service", namespace=NAMESPACE)
    if svc:
        check([(p["name"], p["port"], p.get("targetPort")) for p in svc["spec"]["ports"]] == [("https-metrics", port, "https-metrics")],
              f"metrics Service ports {svc['spec']['ports']}, want https-metrics {port} alone")
    auth = one(objs, "ClusterRole", name=METRICS_AUTH)
    if auth:
        got = flatten(auth["rules"])
        check(got == METRICS_AUTH_RULES, f"{METRICS_AUTH}: extra {sorted(got - METRICS_AUTH_RULES)}, missing {sorted(METRICS_AUTH_RULES - got)}")
        check_binding(objs, "ClusterRoleBinding", METRICS_AUTH, None, "ClusterRole", METRICS_AUTH, sa_name)
    reader = one(objs, "ClusterRole", name=METRICS_READER)
    if reader:
        check(reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}], f"{METRICS_READER}: rules {reader['rules']}")
    bindings = find(objs, "ClusterRoleBinding", name=METRICS_READER)
    if readers:
        if check(len(bindings) == 1, f"metrics.readers: one ClusterRoleBinding {METRICS_READER}"):
            check(bindings[0]["roleRef"]["name"] == METRICS_READER, f"roleRef {bindings[0]['roleRef']}")
            check(bindings[0]["subjects"] == readers, f"subjects {bindings[0]['subjects']}, want {readers}")
    else:
        check(not bindings, "no metrics.readers: the chart binds nobody to the reader role")
    mounts = {m["name"]: m for m in ctr.get("volumeMounts", [])}
    if cert_secret:
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        check(volumes.get("metrics-tls", {}).get("secret", {}).get("secretName") == cert_secret,
              f"metrics.certSecret -> volume metrics-tls of Secret {cert_secret}: {volumes}")
        mount = mounts.get("metrics-tls", {})
        check(mount.get("readOnly") is True and "subPath" not in mount, f"metrics-tls mount {mount}: read-only, whole (updates reach it)")
        check(arg(args, "--metrics-cert-dir") == mount.get("mountPath"), f"--metrics-cert-dir must be the mount's path: {args}")
    else:
        check(arg(args, "--metrics-cert-dir") is None and "metrics-tls" not in mounts,
              "no metrics.certSecret: no --metrics-cert-dir, no mount (a self-signed certificate)")


def check_plain_metrics(objs):
    """metrics.secure=false: today's plain /metrics on http (8080), no TLS port, no reviews."""
    check_common(objs)
    _, _, ctr, args = deployment_parts(objs)
    check(arg(args, "--metrics-secure-addr") is None, f"metrics.secure=false still passes --metrics-secure-addr: {args}")
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    check(ports == {"http": 8080}, f"container ports {ports}, want http: 8080")
    svc = one(objs, "Service", namespace=NAMESPACE)
    if svc:
        check([(p["name"], p["port"], p.get("targetPort")) for p in svc["spec"]["ports"]] == [("http-metrics", 8080, "http")],
              f"metrics Service ports {svc['spec']['ports']}")
    check(not [o for o in objs if o["metadata"]["name"] in METRICS_ROLES],
          "metrics.secure=false still renders the metrics ClusterRoles or bindings")
    sm = one(objs, "ServiceMonitor", namespace=NAMESPACE)
    if sm:
        ep = sm["spec"]["endpoints"]
        check([(e["port"], e["path"], e.get("scheme"), "bearerTokenFile" in e, "authorization" in e, "tlsConfig" in e)
               for e in ep] == [("http-metrics", "/metrics", None, False, False, False)], f"plain ServiceMonitor endpoints {ep}")
        check(not find(objs, "Secret"), "a plain scrape needs no token Secret")
        check(all(e.get("honorLabels") is True for e in ep), "ServiceMonitor must keep honorLabels")


def denying_policy(objs, name):
    """The policy called `name` and its binding of the same name: bound to it, denying, failing
    closed, without parameters. Their specs, or None when either is missing."""
    policy = one(objs, "ValidatingAdmissionPolicy", name=name)
    binding = one(objs, "ValidatingAdmissionPolicyBinding", name=name)
    if not (policy and binding):
        return None
    spec, bspec = policy["spec"], binding["spec"]
    check(bspec.get("policyName") == name, f"binding policyName {bspec.get('policyName')}, want {name}")
    check(bspec.get("validationActions") == ["Deny"], f"{name}: validationActions {bspec.get('validationActions')}")
    check("paramRef" not in bspec and "paramKind" not in spec, f"{name} takes no parameters")
    check(spec.get("failurePolicy") == "Fail", f"{name}: failurePolicy {spec.get('failurePolicy')}, want Fail")
    return spec, bspec


def check_guard(objs, sa_name, namespace_selector):
    """The admission guard: one policy and its binding, named after the release and its namespace,
    denying; every pod write and workload kind judged; the operator's ServiceAccount exempt on pods
    only; two validations per mark (pods, templates), each naming it; the namespaces selected."""
    check(len(find(objs, "ValidatingAdmissionPolicy")) == 2, "two policies: the marks' and the Leases'")
    check_lease_guard(objs, sa_name, namespace_selector)
    found = denying_policy(objs, f"{RELEASE}-leadergroup-operator-marks.{NAMESPACE}")
    if not found:
        return
    spec, bspec = found
    got = set()
    for r in spec["matchConstraints"]["resourceRules"]:
        check(sorted(r.get("operations", [])) == ["CREATE", "UPDATE"], f"rule {r}: operations, want CREATE and UPDATE")
        check(r.get("apiVersions") == ["v1"], f"rule {r}: apiVersions")
        got |= {(g, res) for g in r["apiGroups"] for res in r["resources"]}
    check(got == GUARDED, f"guarded resources: extra {sorted(got - GUARDED)}, missing {sorted(GUARDED - got)}")
    user = f"system:serviceaccount:{NAMESPACE}:{sa_name}"
    exempt = [c for c in spec.get("matchConditions", []) if user in c["expression"]]
    check(len(exempt) == 1 and "'pods'" in exempt[0]["expression"],
          f"one matchCondition must exempt {user}, on pods only: {spec.get('matchConditions')}")
    texts = [v.get("message", "") + v.get("messageExpression", "") for v in spec["validations"]]
    for noun, key in MARKS:
        naming = [t for t in texts if f"{noun} {key}" in t]
        check(len(naming) == 2, f"{noun} {key}: {len(naming)} validations name it, want 2 (pods, templates)")
        check(any(user in t for t in naming), f"{noun} {key}: the pods' message must name {user}")
    check(len(texts) == 2 * len(MARKS), f"{len(texts)} validations, want {2 * len(MARKS)}")
    check(bspec.get("matchResources", {}).get("namespaceSelector") == namespace_selector,
          f"binding namespaceSelector {bspec.get('matchResources', {}).get('namespaceSelector')}, want {namespace_selector}")


# What only the operator may change on a group's Lease (client/src/wire.rs), as the refusals
# name it; a member changes spec.renewTime alone.
LEASE_FIELDS = ["spec.holderIdentity", "spec.acquireTime", "spec.leaseDurationSeconds", "spec.leaseTransitions",
                "metadata.ownerReferences", "label leadergroup.io/group",
                *(f"annotation leadergroup.io/{a}" for a in ["epoch", "arbiter", "liveness", "holder-uid", "lapsed"])]


def check_lease_guard(objs, sa_name, namespace_selector):
    """The guard of the groups' Leases: its own policy and binding, denying; CREATE, UPDATE and
    DELETE of leases; the operator exempt; one validation per field, each naming it; the renewal
    judged by the pod name in the request's user info; the same namespaces as the marks' guard."""
    found = denying_policy(objs, f"{RELEASE}-leadergroup-operator-leases.{NAMESPACE}")
    if not found:
        return
    spec, bspec = found
    rules = spec["matchConstraints"]["resourceRules"]
    check(rules == [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"],
                     "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["leases"]}],
          f"lease guard rules {rules}")
    conditions = " ".join(c["expression"] for c in spec.get("matchConditions", []))
    check("startsWith('leadergroup-')" in conditions, "the lease guard judges the group Leases only")
    user = f"system:serviceaccount:{NAMESPACE}:{sa_name}"
    check(f"!= '{user}'" in conditions, f"the lease guard must exempt {user}")
    texts = [v.get("message", "") + v.get("messageExpression", "") for v in spec["validations"]]
    for field in LEASE_FIELDS:
        check(any(t.startswith(f"'only the leadergroup-operator ServiceAccount ({user}) may") and field in t
                  for t in texts), f"lease guard: a validation must keep {field} to {user}")
    for verb in ["create", "delete"]:
        check(any(f"may {verb} " in t for t in texts), f"lease guard: a validation must refuse {verb}")
    check(any("spec.renewTime" in t and "authentication.kubernetes.io/pod-name" in t for t in texts),
          "lease guard: the renewal's refusal must name spec.renewTime and the pod name it lacks")
    check(bspec.get("matchResources", {}).get("namespaceSelector") == namespace_selector,
          f"lease guard namespaceSelector {bspec.get('matchResources', {}).get('namespaceSelector')}")
    check_lease_keys(texts)


# Where each leadergroup.io/ key of client/src/wire.rs lives when not in a group Lease's
# annotations, and the keys a member writes there (the guard binds them to the pod concerned).
KEYS_ELSEWHERE = {"role": "pod label", "group": "pod annotation and Lease label", "released-by": "operator Lease",
                  "fence": "pod annotation (the barrier)", "fence-epoch": "application object", "cleanup": "finalizer"}
MEMBER_KEYS = {"acknowledged", "acknowledged-by", "acknowledged-by-epoch", "stepped-down", "stepped-down-by",
               "stepped-down-by-epoch"}


def doc_pages(root):
    """The pages a user reads: the README, the chart's README and the book's pages."""
    return [os.path.join(root, p) for p in ("README.md", "charts/leadergroup-operator/README.md")] + sorted(
        os.path.join(root, "docs", p) for p in os.listdir(os.path.join(root, "docs")) if p.endswith(".md"))


def check_lease_keys(texts):
    """Every key the wire format defines is accounted for: a group Lease annotation only the
    operator may write has the guard's validation, a member's has its own, and the chart README
    lists the operator's ones as the guard does and names the members' ones."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "client", "src", "wire.rs")) as f:
        keys = set(re.findall(r'pub const \w+: &str = "leadergroup\.io/([a-z-]+)";', f.read()))
    check(len(keys) >= 20, f"client/src/wire.rs: found only {len(keys)} leadergroup.io/ keys")
    operator_only = set(re.findall(r"may add, change or remove annotation leadergroup\.io/([a-z-]+) of", " ".join(texts)))
    unaccounted = keys - operator_only - MEMBER_KEYS - set(KEYS_ELSEWHERE)
    check(not unaccounted, f"client/src/wire.rs defines {sorted(unaccounted)}: guard them in lease-guard.yaml "
                           "(operator-only), or list them in render_checks.py as a member's or as living elsewhere")
    for key in MEMBER_KEYS:
        check(any(f"annotation leadergroup.io/{key} of" in t for t in texts), f"lease guard: no validation for the member's {key}")
    with open(os.path.join(root, "charts", "leadergroup-operator", "README.md")) as f:
        readme = " ".join(f.read().split())
    for key in MEMBER_KEYS:
        check(f"`leadergroup.io/{key}`" in readme, f"the chart README does not name the member's leadergroup.io/{key}")
    # Wherever a page lists the Lease annotations kept to the operator (a list that starts with
    # `leadergroup.io/epoch`, `arbiter`), it lists the guard's; and no page says a member may
    # change spec.renewTime alone (it acknowledges and steps down too).
    pages = doc_pages(root)
    lists = 0
    for page in pages:
        with open(page) as f:
            text = " ".join(f.read().split())
        where = os.path.relpath(page, root)
        for tail in re.findall(r"`leadergroup\.io/epoch`((?:,? (?:and )?`[a-z-]+`)+)", text):
            listed = {"epoch"} | set(re.findall(r"`([a-z-]+)`", tail))
            if "arbiter" not in listed:
                continue
            lists += 1
            check(listed == operator_only, f"{where} lists the Lease annotations {sorted(listed)}, the guard keeps "
                                           f"{sorted(operator_only)} to the operator")
        check("renewTime` alone" not in text, f"{where}: a member changes more than spec.renewTime (acknowledged, stepped-down)")
    check(lists >= 1, "no page lists the Lease annotations kept to the operator")


def check_no_guard(objs, default_path):
    """admissionGuard.enabled=false: no policy, no binding, everything else as with the defaults."""
    check(not [o for o in objs if o["kind"] in GUARD_KINDS], "admissionGuard.enabled=false still renders the guard")
    rest = sorted(o["kind"] for o in load(default_path) if o["kind"] not in GUARD_KINDS)
    check(sorted(o["kind"] for o in objs) == rest, "without the guard, the other objects must be the defaults'")


def check_watch_namespace(objs, watched):
    check_common(objs)
    # Cluster-wide only the secure /metrics' reviews (a Role cannot grant them) and the
    # scrapers' role; nothing on the groups' objects.
    cluster = {o["metadata"]["name"] for o in find(objs, "ClusterRole") + find(objs, "ClusterRoleBinding")}
    check(cluster == METRICS_ROLES,
          f"watchNamespace: cluster-wide RBAC {sorted(cluster)}, want only {sorted(METRICS_ROLES)}")
    sa = one(objs, "ServiceAccount", namespace=NAMESPACE)
    sa_name = sa["metadata"]["name"] if sa else None
    check_secure_metrics(objs, sa_name, 8443)
    roles = [r for r in find(objs, "Role", namespace=watched) if not r["metadata"]["name"].endswith("-leader-election")]
    if check(len(roles) == 1, f"expected one operator Role in {watched}, found {len(roles)}"):
        got = {(g, r, v) for g, r, v, _ in flatten(roles[0]["rules"])}
        check(got == OPERATOR_RULES,
              f"Role in {watched}: extra {sorted(got - OPERATOR_RULES)}, missing {sorted(OPERATOR_RULES - got)}")
        name = roles[0]["metadata"]["name"]
        check_binding(objs, "RoleBinding", name, watched, "Role", name, sa_name)
    others = {r["metadata"].get("namespace") for r in find(objs, "Role") + find(objs, "RoleBinding")}
    check(others <= {watched, NAMESPACE}, f"Roles in unexpected namespaces {others}")
    _, _, _, args = deployment_parts(objs)
    check(arg(args, "--namespace") == watched, f"--namespace {arg(args, '--namespace')}, want {watched}")
    check_leader_election_rbac(objs, sa_name, arg(args, "--leader-elect-lease-name"))
    # Another release's operator marks the pods of the other namespaces: guard this one only.
    check_guard(objs, sa_name, {"matchLabels": {"kubernetes.io/metadata.name": watched}})


def check_single(objs):
    """replicas=1, leaderElection.enabled=false: no PDB, no --leader-elect, no Lease Role."""
    check_common(objs)
    check(not find(objs, "PodDisruptionBudget"), "no PDB with one replica")
    _, _, _, args = deployment_parts(objs)
    check(not any(a.startswith("--leader-elect") for a in args), f"leader-election flags without leaderElection: {args}")
    check(not [r for r in find(objs, "Role") if r["metadata"]["name"].endswith("-leader-election")],
          "no leader-election Role without leaderElection")


def check_custom(objs):
    """Every pass-through value lands where it belongs."""
    check_common(objs)
    dep, pod, ctr, args = deployment_parts(objs)
    tmpl = dep["spec"]["template"]["metadata"]
    check(tmpl.get("annotations") == {"example.com/scrape": "true"}, f"podAnnotations {tmpl.get('annotations')}")
    check(tmpl["labels"].get("team") == "platform", "podLabels")
    # Helm merges a user's map into the default one: kubernetes.io/os stays unless set to null.
    check(pod.get("nodeSelector") == {"kubernetes.io/os": "linux", "node-role.example.com/infra": "true"},
          f"nodeSelector {pod.get('nodeSelector')}")
    check(pod.get("tolerations") == [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}], "tolerations")
    check("podAntiAffinity" in (pod.get("affinity") or {}), "affinity")
    check(pod.get("priorityClassName") == "system-cluster-critical", "priorityClassName")
    check(pod.get("imagePullSecrets") == [{"name": "regcred"}], "imagePullSecrets")
    check(ctr["image"] == "registry.example.com/lgo@sha256:" + "a" * 64, f"image with digest: {ctr['image']}")
    check(ctr["imagePullPolicy"] == "Always", "image.pullPolicy")
    check(dep["spec"]["replicas"] == 3, "replicas")
    check(pod.get("topologySpreadConstraints", [{}])[0].get("topologyKey") == "topology.kubernetes.io/zone",
          f"topologySpreadConstraints {pod.get('topologySpreadConstraints')}")
    check(pod.get("terminationGracePeriodSeconds") == 90, "terminationGracePeriodSeconds")
    check(arg(args, "--identity") == "$(POD_NAME)" and args[-1] == "--identity=$(POD_NAME)",
          f"extraArgs after the chart's own: {args}")
    check(arg(args, "--http-addr") == "0.0.0.0:9090", "metrics.port -> --http-addr")
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    check(ports == {"http": 9090, "https-metrics": 9443}, f"metrics.port, metrics.securePort -> container ports: {ports}")
    check(arg(args, "--log-format") == "text", "logFormat")
    check(arg(args, "--concurrency") == "128", "concurrency")
    check(arg(args, "--leader-elect-lease-duration") == "30", "leaderElection.leaseDurationSeconds")
    env = {e["name"]: e.get("value") for e in ctr.get("env", [])}
    check(env.get("RUST_LOG") == "debug", "logLevel -> RUST_LOG")
    check(env.get("TZ") == "UTC" and "POD_NAME" in env, f"extraEnv beside the chart's own: {sorted(env)}")
    sa = one(objs, "ServiceAccount", namespace=NAMESPACE)
    if sa:
        check(sa["metadata"].get("annotations") == {"example.com/role": "x"}, "serviceAccount.annotations")
    svc = one(objs, "Service", namespace=NAMESPACE)
    if svc:
        check(svc["metadata"].get("annotations") == {"example.com/a": "b"}, "service.annotations")
        check([p["port"] for p in svc["spec"]["ports"]] == [9443], "metrics.securePort -> the Service's port")
    sm = one(objs, "ServiceMonitor", namespace=NAMESPACE)
    if sm and svc:
        check(sm["metadata"]["labels"].get("release") == "prometheus", "serviceMonitor.labels")
        check(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(),
              "ServiceMonitor selector must select the metrics Service")
        ep = sm["spec"]["endpoints"]
        check([(e["port"], e["path"], e["interval"]) for e in ep] == [("https-metrics", "/metrics", "15s")],
              f"ServiceMonitor endpoints {ep}")
        check([e.get("tlsConfig") for e in ep] == [CUSTOM_TLS_CONFIG],
              f"serviceMonitor.tlsConfig replaces insecureSkipVerify: {[e.get('tlsConfig') for e in ep]}")
        check([e.get("authorization") for e in ep] == [CUSTOM_AUTHORIZATION],
              f"serviceMonitor.authorization: {[e.get('authorization') for e in ep]}")
        check([(e.get("relabelings"), e.get("metricRelabelings")) for e in ep] == [(CUSTOM_RELABELINGS, CUSTOM_METRIC_RELABELINGS)],
              f"serviceMonitor.relabelings, metricRelabelings: {ep}")
        check(not find(objs, "Secret") and not find(objs, "ServiceAccount", name=SCRAPER),
              "serviceMonitor.authorization given: no scraper ServiceAccount nor token Secret")
    check_secure_metrics(objs, sa["metadata"]["name"] if sa else None, 9443, cert_secret="metrics-tls",
                         readers=[{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"},
                                  {"kind": "Group", "name": "scrapers", "apiGroup": "rbac.authorization.k8s.io"}])
    check(not find(objs, "CustomResourceDefinition"), "crds.enabled=false must not render the CRD")
    check_guard(objs, sa["metadata"]["name"] if sa else None, {"matchLabels": {"team": "platform"}})


# The ServiceMonitor's own ServiceAccount and token Secret.
SCRAPER = f"{FULLNAME}-metrics-scraper"
# serviceMonitor.tlsConfig of static.sh's custom values.
CUSTOM_TLS_CONFIG = {"ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}},
                     "serverName": f"{FULLNAME}-metrics.{NAMESPACE}.svc"}
# serviceMonitor.authorization, relabelings and metricRelabelings of static.sh's custom values.
CUSTOM_AUTHORIZATION = {"type": "Bearer", "credentials": {"name": "prometheus-token", "key": "token"}}
CUSTOM_RELABELINGS = [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
CUSTOM_METRIC_RELABELINGS = [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_gc_.*"}]


def runbook_anchors():
    """The anchors of docs/runbooks.md's headings, as a Markdown renderer makes them."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "runbooks.md")
    with open(path) as f:
        headings = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def check_monitoring(objs, rules_out):
    """prometheusRule, serviceMonitor and grafanaDashboard on, metrics.perGroup off: the rules
    (written to rules_out for promtool), each alert's severity and runbook, the ServiceMonitor
    keeping the groups' namespace label, the dashboard ConfigMap for Grafana's sidecar."""
    check_common(objs)
    _, _, _, args = deployment_parts(objs)
    check(arg(args, "--per-group-metrics") == "false", "--per-group-metrics must follow metrics.perGroup (false)")
    rule = one(objs, "PrometheusRule", namespace=NAMESPACE)
    if rule:
        with open(rules_out, "w") as f:
            yaml.safe_dump(rule["spec"], f, sort_keys=False)
        alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
        names = {r["alert"] for r in alerts}
        want = {"LeaderGroupNoLeader", "LeaderGroupLeaderFlapping", "LeaderGroupHeartbeatNoRenewal",
                "LeaderGroupOperatorNoActiveReplica", "LeaderGroupOperatorTwoActive", "LeaderGroupReconcileErrors"}
        check(names == want, f"alerts {sorted(names)}, want {sorted(want)}")
        severities = {r["labels"].get("severity") for r in alerts}
        check(severities == {"warning", "critical"}, f"severities {severities}, want warning and critical")
        anchors = runbook_anchors()
        for r in alerts:
            url = r["annotations"].get("runbook_url", "")
            anchor = url.rpartition("#")[2]
            check(url.split("#")[0].endswith("docs/runbooks.md") and anchor in anchors,
                  f"{r['alert']}: runbook_url {url} names no section of docs/runbooks.md ({sorted(anchors)})")
    sm = one(objs, "ServiceMonitor", namespace=NAMESPACE)
    if sm:
        ep = sm["spec"]["endpoints"]
        check(all(e.get("honorLabels") is True for e in ep),
              "ServiceMonitor must keep the scraped namespace label (honorLabels: true)")
        # The secure /metrics by default: https with the token of the chart's scraper
        # ServiceAccount, through a Secret (prometheus-operator's `authorization`; the deprecated
        # bearerTokenFile names a file of the Prometheus pod, which a Prometheus that denies
        # ServiceMonitors file access refuses), the self-signed certificate not verified.
        check([(e["port"], e.get("scheme"), e.get("authorization"), e.get("tlsConfig")) for e in ep]
              == [("https-metrics", "https", {"type": "Bearer", "credentials": {"name": SCRAPER, "key": "token"}},
                   {"insecureSkipVerify": True})], f"secure ServiceMonitor endpoints {ep}")
        check(not any(k in e for e in ep for k in ("bearerTokenFile", "bearerTokenSecret", "relabelings", "metricRelabelings")),
              f"no deprecated token field, no relabelings by default: {ep}")
        sa = one(objs, "ServiceAccount", name=SCRAPER, namespace=NAMESPACE)
        check(sa is not None and sa.get("automountServiceAccountToken") is False, f"scraper ServiceAccount {sa}")
        secret = one(objs, "Secret", name=SCRAPER, namespace=NAMESPACE)
        if secret:
            check(secret.get("type") == "kubernetes.io/service-account-token"
                  and secret["metadata"].get("annotations") == {"kubernetes.io/service-account.name": SCRAPER},
                  f"the scraper's token Secret {secret}")
            check("data" not in secret and "stringData" not in secret, "the token controller fills the Secret in")
        check_binding(objs, "ClusterRoleBinding", f"{SCRAPER}.{NAMESPACE}", None, "ClusterRole", METRICS_READER, SCRAPER)
        svc = one(objs, "Service", namespace=NAMESPACE)
        # The rules' job label is the Service's name (prometheus-operator's default job).
        check(svc is not None and svc["metadata"]["name"] == f"{FULLNAME}-metrics", "the rules' job: <fullname>-metrics")
        if rule:
            exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
            check(all(f'job="{FULLNAME}-metrics"' in e for e in exprs),
                  f"every alert selects the ServiceMonitor's job {FULLNAME}-metrics: {exprs}")
    cm = one(objs, "ConfigMap", namespace=NAMESPACE)
    if cm:
        check(cm["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard ConfigMap lacks grafana_dashboard: \"1\"")
        (key, text), = cm["data"].items()
        dashboard = json.loads(text)
        check(key.endswith(".json") and dashboard.get("uid") == "leadergroup-operator",
              f"dashboard ConfigMap key {key}, uid {dashboard.get('uid')}")


def check_existing_service_account(objs, sa_name):
    """serviceAccount.create=false: no ServiceAccount, and the guard exempts the one named."""
    check_common(objs)
    check(not find(objs, "ServiceAccount"), "serviceAccount.create=false still renders a ServiceAccount")
    _, pod, _, _ = deployment_parts(objs)
    check(pod.get("serviceAccountName") == sa_name, f"serviceAccountName {pod.get('serviceAccountName')}, want {sa_name}")
    check_guard(objs, sa_name, {})


def check_crd(objs_path, source_path, keep):
    """The rendered CRD is the source file byte for byte, plus the chart's labels and annotation."""
    with open(objs_path) as f:
        docs = f.read().split("\n---\n")
    crd_docs = [d for d in docs if "# Source: leadergroup-operator/templates/crd.yaml" in d]
    if not check(len(crd_docs) == 1, f"expected one rendered CRD document, found {len(crd_docs)}"):
        return
    lines = crd_docs[0].split("\n")
    lines = lines[lines.index("# Source: leadergroup-operator/templates/crd.yaml") + 1:]
    # Drop what the template splices in under the top-level metadata: labels and annotations.
    out, i = [], 0
    meta = yaml.safe_load("\n".join(lines))["metadata"]
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.rstrip() == "metadata:":
            indent = len(lines[i]) - len(lines[i].lstrip(" "))
            while i < len(lines):
                key = lines[i][indent:]
                if lines[i].startswith(" " * indent) and key.split(":")[0] in ("labels", "annotations") and key[:1] != " ":
                    i += 1
                    while i < len(lines) and lines[i].startswith(" " * (indent + 1)):
                        i += 1
                else:
                    break
    with open(source_path) as f:
        source = f.read()
    if source.startswith("---\n"):  # the template drops a leading document marker
        source = source[4:]
    rendered = "\n".join(out)
    if not check(rendered.rstrip("\n") == source.rstrip("\n"),
                 f"rendered CRD (labels and annotations removed) differs from {source_path}"):
        import difflib
        sys.stderr.writelines(difflib.unified_diff(source.rstrip("\n").splitlines(True), rendered.rstrip("\n").splitlines(True),
                                                   source_path, "rendered", n=1))
        sys.stderr.write("\n")
    check(yaml.safe_load(rendered) == yaml.safe_load(source), "rendered CRD is not the same object as the source")
    check(meta.get("labels", {}).get("app.kubernetes.io/managed-by") == "Helm", "CRD must carry the chart's labels")
    ann = meta.get("annotations") or {}
    if keep:
        check(ann == {"helm.sh/resource-policy": "keep"}, f"CRD annotations {ann}, want the keep policy")
    else:
        check("helm.sh/resource-policy" not in ann, "crds.keep=false must not set the keep policy")


def check_notes(path):
    """NOTES.txt says what to do next, with an example LeaderGroup that uses the API's fields."""
    import textwrap
    with open(path) as f:
        text = f.read()
    if not check("NOTES:" in text, "helm install --dry-run printed no NOTES"):
        return
    notes = text[text.index("NOTES:"):]
    check("kubectl get leadergroups" in notes, "NOTES must show kubectl get leadergroups")
    check("kubectl get lg" in notes, "NOTES must show kubectl get lg")
    if not check("<<'YAML'" in notes and "   YAML\n" in notes, "NOTES must hold an example LeaderGroup"):
        return
    body = notes[notes.index("<<'YAML'"):].split("\n", 1)[1]
    example = yaml.safe_load(textwrap.dedent(body[:body.index("   YAML\n")]))
    check(example.get("apiVersion") == "leadergroup.io/v1alpha1" and example.get("kind") == "LeaderGroup",
          f"example is {example.get('apiVersion')} {example.get('kind')}")
    spec = example.get("spec") or {}
    check(bool((spec.get("selector") or {}).get("matchLabels")), "example spec.selector.matchLabels")
    check(isinstance(spec.get("leaseDurationSeconds"), int) and 1 <= spec["leaseDurationSeconds"] <= 3600,
          "example spec.leaseDurationSeconds in 1..3600")
    check(spec.get("paused") is False, "example spec.paused")
    check(set(spec) <= {"selector", "leaseDurationSeconds", "preferredLeader", "paused"}, f"example spec fields {set(spec)}")
    check("preferredLeader" in body, "example mentions spec.preferredLeader")


def check_readme_names(objs):
    """Every object name the chart README's "What it installs" table gives is one the chart renders
    (all optional objects on): `<fullname>` and `<release namespace>` filled in for this render."""
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "leadergroup-operator", "README.md")
    with open(readme) as f:
        text = f.read()
    table = text[text.index("## What it installs"):text.index("<!-- ANCHOR_END: install -->")]
    fullname = f"{RELEASE}-leadergroup-operator"
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "`" in line.split("|")[1]]
    check(len(rows) >= 6, f"the README's table of objects has {len(rows)} named rows")
    for cell in rows:
        name = re.search(r"`([^`]+)`", cell).group(1)
        name = name.replace("<fullname>", fullname).replace("<release namespace>", NAMESPACE)
        kinds = [k.strip() for k in re.split(r"\+", cell[:cell.index("`")])]
        kinds = [k.split()[0] for k in kinds if k]
        for kind in kinds:
            check(any(o["kind"] == kind and o["metadata"]["name"] == name for o in objs),
                  f"README names {kind} {name!r}, the chart renders no such object")
    dep, _, _, args = deployment_parts(objs)
    lease = f"operator-{fullname}"
    # The other pages name the chart's objects by the same pattern, and only objects it renders.
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    # The chart README defines <fullname> itself, and its table is checked above.
    pages = [p for p in doc_pages(root) if not p.endswith(os.path.join("charts", "leadergroup-operator", "README.md"))]
    rendered = {o["metadata"]["name"] for o in objs} | {fullname, lease}
    for page in pages:
        with open(page) as f:
            for name in re.findall(r"`([^`\n]*<(?:fullname|release)>[^`\n]*)`", f.read()):
                where = os.path.relpath(page, root)
                if not check("<release>-" not in name,
                             f"{where}: `{name}`: write <fullname> (a release named like leadergroup-operator is the whole name)"):
                    continue
                filled = name.replace("<fullname>", fullname).replace("<release namespace>", NAMESPACE)
                check(filled in rendered, f"{where} names `{name}`, the chart renders no object {filled!r}")
    check(f"`operator-<fullname>`" in table and arg(args, "--leader-elect-lease-name") == lease,
          f"README names the operator's Lease operator-<fullname>; the chart passes {arg(args, '--leader-elect-lease-name')}")
    # The operator's Lease of the install's release (leadergroup-operator in leadergroup-system),
    # wherever a page names it in full: `leadergroup-system/<name>` beside the word Lease.
    install_lease = lease.replace(fullname, "leadergroup-operator")
    for page in doc_pages(root):
        with open(page) as f:
            text = " ".join(f.read().split())
        for name in re.findall(r"Lease `leadergroup-system/([^`]+)`", text):
            check(name == install_lease, f"{os.path.relpath(page, root)} names the operator's Lease "
                  f"leadergroup-system/{name}; the chart's release leadergroup-operator holds {install_lease}")


def main():
    name, path, *rest = sys.argv[1:]
    if name == "notes":
        check_notes(path)
    elif name == "crd":
        check_crd(path, rest[0], rest[1] == "keep")
    else:
        objs = load(path)
        {"default": lambda: check_default(objs),
         "watch-namespace": lambda: check_watch_namespace(objs, rest[0]),
         "single": lambda: check_single(objs),
         "custom": lambda: check_custom(objs),
         "monitoring": lambda: check_monitoring(objs, rest[0]),
         "plain-metrics": lambda: check_plain_metrics(objs),
         "readme-names": lambda: check_readme_names(objs),
         "registry-image": lambda: check_registry_image(objs),
         "platform": lambda: check_platform(objs),
         "no-guard": lambda: check_no_guard(objs, rest[0]),
         "existing-service-account": lambda: check_existing_service_account(objs, rest[0])}[name]()
    for e in errors:
        print(f"  {name}: {e}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
