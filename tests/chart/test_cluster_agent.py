"""The cluster agent StatefulSet: identity, persistence, HA, restricted security, RBAC."""

from __future__ import annotations

import copy

import pytest

from testkit.chart import (
    NAMESPACE,
    RELEASE,
    Helm,
    container,
    env,
    mounts,
    pod_spec,
    volumes,
)
from testkit.pod_security import restricted_violations

NAME = f"{RELEASE}-cluster-agent"
READ = ["list"]
# What the cluster agent reads for inventory: the page's Security section and the collector's calls.
INVENTORY_RULES = [
    {"apiGroups": [""], "resources": ["nodes", "namespaces", "pods", "services"], "verbs": READ},
    {
        "apiGroups": ["apps"],
        "resources": ["deployments", "statefulsets", "daemonsets"],
        "verbs": READ,
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": READ},
    {"apiGroups": ["argoproj.io"], "resources": ["rollouts"], "verbs": READ},
]


@pytest.fixture(scope="module")
def quick(helm: Helm, ci_values):
    return helm.template([ci_values["quick-start"]])


@pytest.fixture(scope="module")
def ha(helm: Helm, ci_values):
    return helm.template([ci_values["ha"]])


def test_release_proxima_agent_in_proxima_system_renders_statefulset_proxima_agent_cluster_agent(
    quick,
):
    sts = quick.get("StatefulSet", "proxima-agent-cluster-agent")
    assert sts["metadata"]["namespace"] == "proxima-system"
    assert sts["spec"]["replicas"] == 1


def test_the_statefulset_is_governed_by_a_headless_service_of_the_same_name(quick):
    service = quick.get("Service", NAME)
    assert quick.statefulset["spec"]["serviceName"] == NAME
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == quick.statefulset["spec"]["selector"]["matchLabels"]


def test_the_cluster_agent_is_a_k8s_cluster_collector_named_after_its_pod(quick):
    sts = quick.statefulset
    assert container(sts)["command"] == ["proxima-agent", "run"]
    variables = env(sts)
    assert variables["PROXIMA_AGENT_TYPE"] == "k8s-cluster-collector"
    assert variables["PROXIMA_AGENT_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["PROXIMA_POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_the_cluster_agent_gets_its_whole_configuration_from_env(quick):
    variables = env(quick.statefulset)
    assert variables["PROXIMA_BACKEND_URL"] == "https://api-console.prxm.uz"
    assert variables["PROXIMA_INSTALL_TOKEN_FILE"] == "/etc/proxima/install-token/token"
    assert variables["PROXIMA_DATA_DIR"] == "/var/lib/proxima-agent"
    assert variables["PROXIMA_CLUSTER_NAME"] == "my-cluster"
    assert variables["PROXIMA_CLUSTER_SLUG"] == "my-cluster"
    assert variables["PROXIMA_SYNC_INTERVAL"] == "5m"
    assert variables["PROXIMA_HEARTBEAT_INTERVAL"] == "30s"
    assert variables["PROXIMA_POD_LIMIT"] == "5000"
    assert variables["PROXIMA_EXCLUDE_NAMESPACES"] == ""
    assert variables["PROXIMA_LEASE_NAME"] == NAME
    assert variables["PROXIMA_REPLICAS"] == "1"
    assert variables["PROXIMA_HEALTH_HOST"] == "0.0.0.0"
    assert variables["PROXIMA_HEALTH_PORT"] == "8181"
    assert variables["PROXIMA_LOG_LEVEL"] == "info"
    assert variables["PROXIMA_LOG_FORMAT"] == "plain"
    for host_only in ("PROXIMA_HOST_ROOT", "PROXIMA_HOST_PROC", "PROXIMA_HOST_SYS"):
        assert host_only not in variables


def test_the_pages_custom_values_reach_the_cluster_agent(helm: Helm, ci_values):
    variables = env(helm.template([ci_values["custom-values"]]).statefulset)
    assert variables["PROXIMA_CLUSTER_NAME"] == "production-rke2"
    assert variables["PROXIMA_CLUSTER_SLUG"] == "production-rke2"
    assert variables["PROXIMA_SYNC_INTERVAL"] == "5m"
    assert variables["PROXIMA_HEARTBEAT_INTERVAL"] == "30s"
    assert variables["PROXIMA_POD_LIMIT"] == "5000"
    assert variables["PROXIMA_EXCLUDE_NAMESPACES"] == "kube-system"


def test_excluded_namespaces_are_passed_comma_separated(helm: Helm, ci_values):
    sts = helm.template(
        [ci_values["quick-start"]],
        {"clusterAgent.excludeNamespaces": "{kube-system,kube-public,cattle-system}"},
    ).statefulset
    assert env(sts)["PROXIMA_EXCLUDE_NAMESPACES"] == "kube-system,kube-public,cattle-system"


def test_each_replica_gets_its_own_pvc_named_data_mounted_at_the_data_directory(ha):
    sts = ha.statefulset
    [claim] = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in claim["spec"], "empty uses the cluster default"
    assert mounts(sts)["/var/lib/proxima-agent"]["name"] == "data"
    # The claim template is the only "data": no pod volume may shadow it and be shared.
    assert "data" not in volumes(sts)
    assert not ha.all("PersistentVolumeClaim")


@pytest.mark.parametrize(("value", "rendered"), [("fast-ssd", "fast-ssd"), ("-", "")])
def test_the_storage_class_is_a_value_and_a_dash_means_no_dynamic_provisioning(
    helm: Helm, ci_values, value: str, rendered: str
):
    sts = helm.template(
        [ci_values["ha"]], {"clusterAgent.persistence.storageClassName": value}
    ).statefulset
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == rendered


def test_ha_runs_two_replicas_with_a_pdb_spread_across_nodes(ha):
    sts = ha.statefulset
    assert sts["spec"]["replicas"] == 2
    assert env(sts)["PROXIMA_REPLICAS"] == "2"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    pdb = ha.get("PodDisruptionBudget", NAME)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "cluster-agent"
    )
    [term] = pod_spec(sts)["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_a_single_replica_has_no_pdb_and_no_anti_affinity(quick):
    assert quick.all("PodDisruptionBudget") == []
    assert "affinity" not in pod_spec(quick.statefulset)


def test_an_operators_affinity_replaces_the_default_anti_affinity(helm: Helm, ci_values):
    sts = helm.template(
        [ci_values["ha"]],
        {"clusterAgent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
         ".nodeSelectorTerms[0].matchExpressions[0].key": "pool",
         "clusterAgent.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
         ".nodeSelectorTerms[0].matchExpressions[0].operator": "Exists"},
    ).statefulset  # fmt: skip
    assert set(pod_spec(sts)["affinity"]) == {"nodeAffinity"}


def test_without_persistence_a_single_replica_keeps_its_state_in_an_emptydir_and_notes_warn(
    helm: Helm, ci_values
):
    values = {"clusterAgent.persistence.enabled": False}
    sts = helm.template([ci_values["quick-start"]], values).statefulset
    assert "volumeClaimTemplates" not in sts["spec"]
    assert volumes(sts)["data"] == {"name": "data", "emptyDir": {}}
    notes = helm.notes([ci_values["quick-start"]], values)
    assert "WARNING: clusterAgent.persistence.enabled is false" in notes
    assert "release-identity" in notes


def test_the_cluster_agent_pod_meets_the_restricted_pod_security_standard(quick, ha):
    for rendering in (quick, ha):
        sts = rendering.statefulset
        annotations = sts["spec"]["template"]["metadata"].get("annotations", {})
        assert restricted_violations(pod_spec(sts), annotations) == []


def test_the_cluster_agent_pod_without_persistence_still_meets_the_restricted_standard(
    helm: Helm, ci_values
):
    sts = helm.template(
        [ci_values["quick-start"]], {"clusterAgent.persistence.enabled": False}
    ).statefulset
    assert restricted_violations(pod_spec(sts)) == []


MUTATIONS = {
    "host namespaces": lambda s: s.update(hostNetwork=True),
    "hostPath volumes": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    "privilege escalation": lambda s: s["containers"][0]["securityContext"].pop(
        "allowPrivilegeEscalation"
    ),
    "running as non-root": lambda s: (
        s["securityContext"].pop("runAsNonRoot"),
        s["containers"][0]["securityContext"].pop("runAsNonRoot"),
    ),
    "non-root user": lambda s: s["containers"][0]["securityContext"].update(runAsUser=0),
    "seccomp": lambda s: (
        s["securityContext"].pop("seccompProfile"),
        s["containers"][0]["securityContext"].pop("seccompProfile"),
    ),
    "capabilities": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
        add=["SYS_ADMIN"]
    ),
    "privileged": lambda s: s["containers"][0]["securityContext"].update(privileged=True),
    "host ports": lambda s: s["containers"][0]["ports"][0].update(hostPort=8181),
}


@pytest.mark.parametrize("rule", sorted(MUTATIONS))
def test_the_restricted_checker_catches_each_broken_rule(quick, rule: str):
    spec = copy.deepcopy(pod_spec(quick.statefulset))
    MUTATIONS[rule](spec)
    problems = restricted_violations(spec)
    assert any(p.startswith(rule) for p in problems), problems


def test_the_cluster_agent_runs_as_uid_65532_read_only_with_every_capability_dropped(quick):
    pod_security = pod_spec(quick.statefulset)["securityContext"]
    security = container(quick.statefulset)["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == 65532
    assert pod_security["fsGroup"] == 65532, "the PVC must be writable by the agent"
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_cluster_agent_writes_only_to_its_data_volume_and_a_tmp_emptydir(quick):
    sts = quick.statefulset
    writable = {path for path, m in mounts(sts).items() if not m.get("readOnly")}
    assert writable == {"/var/lib/proxima-agent", "/tmp"}


def test_the_cluster_agent_probes_hit_readyz_and_livez(quick):
    c = container(quick.statefulset)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert c["ports"][0]["containerPort"] == 8181


def test_the_cluster_role_grants_exactly_the_read_only_inventory_rules(quick):
    role = quick.get("ClusterRole", NAME)
    assert role["rules"] == INVENTORY_RULES


def test_the_cluster_role_never_reaches_secrets_or_configmaps_and_never_writes(quick):
    rules = quick.get("ClusterRole", NAME)["rules"]
    assert rules
    for rule in rules:
        assert not {"secrets", "configmaps", "*"} & set(rule["resources"])
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert "*" not in rule["apiGroups"]


def test_the_cluster_role_lists_argo_rollouts(quick):
    rules = quick.get("ClusterRole", NAME)["rules"]
    assert any(
        "argoproj.io" in r["apiGroups"] and "rollouts" in r["resources"] and "list" in r["verbs"]
        for r in rules
    )


def test_the_cluster_role_is_bound_to_the_statefulsets_service_account(quick):
    sa = pod_spec(quick.statefulset)["serviceAccountName"]
    assert quick.get("ServiceAccount", sa)["metadata"]["namespace"] == NAMESPACE
    binding = quick.get("ClusterRoleBinding", NAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_the_lease_role_covers_only_its_own_lease_in_the_release_namespace(quick):
    lease = env(quick.statefulset)["PROXIMA_LEASE_NAME"]
    [role] = [r for r in quick.all("Role") if r["metadata"]["name"].endswith("-leader-election")]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [lease], "verbs": ["get", "update"]},
    ]  # fmt: skip
    [binding] = [
        b for b in quick.all("RoleBinding") if b["metadata"]["name"] == role["metadata"]["name"]
    ]
    assert binding["metadata"]["namespace"] == NAMESPACE
    sa = pod_spec(quick.statefulset)["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_a_custom_lease_name_reaches_both_the_agent_and_the_role(helm: Helm, ci_values):
    rendering = helm.template([ci_values["ha"]], {"clusterAgent.leaseName": "proxima-leader"})
    assert env(rendering.statefulset)["PROXIMA_LEASE_NAME"] == "proxima-leader"
    [role] = [r for r in rendering.all("Role") if r["metadata"]["name"].endswith("-election")]
    assert role["rules"][1]["resourceNames"] == ["proxima-leader"]


def test_cluster_only_renders_no_node_agent(helm: Helm, ci_values):
    rendering = helm.template([ci_values["cluster-only"]])
    assert rendering.statefulset
    assert rendering.all("DaemonSet") == []
    assert not [d for d in rendering.documents if "node-agent" in d["metadata"]["name"]]


def test_a_namespace_created_by_the_chart_admits_what_the_chart_deploys(helm: Helm, ci_values):
    both = helm.template([ci_values["quick-start"]], {"namespace.create": True})
    [ns] = both.all("Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # helm uninstall keeps it (tests/cluster/test_pod_security.py shows why on a real server).
    assert ns["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    cluster_only = helm.template([ci_values["cluster-only"]], {"namespace.create": True})
    [ns] = cluster_only.all("Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_namespace_name_moves_every_namespaced_resource_and_the_lease_role(helm: Helm, ci_values):
    rendering = helm.template([ci_values["quick-start"]], {"namespace.name": "proxima-agents"})
    namespaced = [
        doc
        for doc in rendering.documents
        if doc["kind"] not in {"ClusterRole", "ClusterRoleBinding"}
    ]
    assert namespaced
    for doc in namespaced:
        assert doc["metadata"]["namespace"] == "proxima-agents", doc["kind"]
    bindings = [b for kind in ("ClusterRoleBinding", "RoleBinding") for b in rendering.all(kind)]
    assert bindings
    for binding in bindings:
        assert binding["subjects"][0]["namespace"] == "proxima-agents"
