"""The node agent DaemonSet: names, the data directory, host mounts, env, security, RBAC."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from testkit.chart import (
    NAMESPACE,
    Helm,
    container,
    env,
    mounts,
    pod_spec,
    volumes,
)
from testkit.pod_security import restricted_violations

DATA = "/var/lib/proxima-agent"
# The page's check, verbatim but for the kubectl invocation (no cluster here).
PAGE_JSONPATH = '{range .spec.template.spec.volumes[?(@.name=="data")]}{.hostPath.path}{"\\n"}{end}'


@pytest.fixture(scope="module")
def quick(helm: Helm, ci_values):
    return helm.template([ci_values["quick-start"]])


def test_release_proxima_agent_in_proxima_system_renders_daemonset_proxima_agent_node_agent(
    quick,
):
    ds = quick.get("DaemonSet", "proxima-agent-node-agent")
    assert ds["metadata"]["namespace"] == "proxima-system"


def test_the_node_agent_data_volume_is_named_data_and_is_a_hostpath_of_the_default_directory(
    quick,
):
    data = volumes(quick.daemonset)["data"]
    assert data["hostPath"] == {"path": "/var/lib/proxima-agent", "type": "DirectoryOrCreate"}


@pytest.mark.parametrize(
    "host_dir", ["/var/lib/proxima-agent", "/var/lib/proxima-node-agent", "/data/proxima"]
)
def test_the_node_agent_data_volume_is_always_mounted_at_var_lib_proxima_agent(
    helm: Helm, ci_values, host_dir: str
):
    ds = helm.template([ci_values["quick-start"]], {"nodeAgent.hostDataDir": host_dir}).daemonset
    assert volumes(ds)["data"]["hostPath"]["path"] == host_dir
    mount = mounts(ds)[DATA]
    assert mount["name"] == "data"
    assert not mount.get("readOnly")
    assert env(ds)["PROXIMA_DATA_DIR"] == DATA


def test_host_agent_coexistence_moves_only_the_host_side_of_the_data_mount(helm: Helm, ci_values):
    ds = helm.template([ci_values["host-agent-coexistence"]]).daemonset
    assert volumes(ds)["data"]["hostPath"]["path"] == "/var/lib/proxima-node-agent"
    assert mounts(ds)[DATA]["name"] == "data"


def _page_check(kubectl: Path, daemonset: dict, tmp_path: Path) -> str:
    """The page's `kubectl get ds … -o jsonpath=… | grep -x …`, on the rendered DaemonSet.

    kubectl evaluates the page's exact jsonpath on the object locally (annotate --local, no
    API server), and grep -x filters like on the page. Returns what the pipeline prints.
    """
    manifest = tmp_path / "daemonset.yaml"
    manifest.write_text(yaml.safe_dump(daemonset))
    jsonpath = subprocess.run(
        [str(kubectl), "annotate", "--local", "-f", str(manifest), "check=1",
         "-o", f"jsonpath={PAGE_JSONPATH}"],
        capture_output=True,
        text=True,
        env={"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"},
        check=True,
    )  # fmt: skip
    grep = subprocess.run(
        ["grep", "-x", "/var/lib/proxima-agent"], input=jsonpath.stdout, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert grep.returncode in (0, 1), grep.stderr
    return grep.stdout


def test_the_pages_identity_check_flags_a_daemonset_on_the_host_agents_directory(
    quick, kubectl_binary: Path, tmp_path: Path
):
    assert _page_check(kubectl_binary, quick.daemonset, tmp_path) == "/var/lib/proxima-agent\n"


def test_the_pages_identity_check_prints_nothing_with_the_host_agent_coexistence_values(
    helm: Helm, ci_values, kubectl_binary: Path, tmp_path: Path
):
    ds = helm.template([ci_values["host-agent-coexistence"]]).daemonset
    assert _page_check(kubectl_binary, ds, tmp_path) == ""


def test_the_pages_identity_check_is_not_fooled_by_a_trailing_slash_because_the_chart_refuses_it(
    helm: Helm, ci_values
):
    message = helm.template_error(
        [ci_values["quick-start"]], {"nodeAgent.hostDataDir": "/var/lib/proxima-agent/"}
    )
    assert 'nodeAgent.hostDataDir must be a clean absolute path other than "/"' in message


def test_the_node_agent_runs_proxima_agent_run_as_a_k8s_node_monitor_named_after_its_node(quick):
    ds = quick.daemonset
    assert container(ds)["command"] == ["proxima-agent", "run"]
    variables = env(ds)
    assert variables["PROXIMA_AGENT_TYPE"] == "k8s-node-monitor"
    assert variables["PROXIMA_AGENT_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_node_agent_gets_its_whole_configuration_from_env(quick):
    variables = env(quick.daemonset)
    assert variables["PROXIMA_BACKEND_URL"] == "https://api-console.prxm.uz"
    assert variables["PROXIMA_INSTALL_TOKEN_FILE"] == "/etc/proxima/install-token/token"
    assert variables["PROXIMA_HEARTBEAT_INTERVAL"] == "30s"
    assert variables["PROXIMA_METRICS_INTERVAL"] == "60s"
    assert variables["PROXIMA_LOG_LEVEL"] == "info"
    assert variables["PROXIMA_LOG_FORMAT"] == "plain"
    assert variables["PROXIMA_HEALTH_HOST"] == "0.0.0.0"
    assert variables["PROXIMA_HEALTH_PORT"] == "8181"
    assert variables["PROXIMA_HOST_METRICS"] == "true"
    assert variables["PROXIMA_CLUSTER_NAME"] == "my-cluster"
    assert variables["PROXIMA_CLUSTER_SLUG"] == "my-cluster"
    assert "PROXIMA_INSTALL_TOKEN" not in variables, "the token must come from a file"


def test_the_kubelet_url_is_built_from_the_node_ip_declared_before_it(quick):
    names = [var["name"] for var in container(quick.daemonset)["env"]]
    variables = env(quick.daemonset)
    assert variables["NODE_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert variables["PROXIMA_KUBELET_URL"] == "https://$(NODE_IP):10250"
    # Kubernetes expands $(VAR) only from variables defined earlier in the list.
    assert names.index("NODE_IP") < names.index("PROXIMA_KUBELET_URL")
    assert variables["PROXIMA_KUBELET_INSECURE_SKIP_VERIFY"] == "false"


def test_kubelet_port_and_insecure_skip_verify_are_values(helm: Helm, ci_values):
    ds = helm.template(
        [ci_values["quick-start"]],
        {"nodeAgent.kubelet.port": 10255, "nodeAgent.kubelet.insecureSkipVerify": True},
    ).daemonset
    assert env(ds)["PROXIMA_KUBELET_URL"] == "https://$(NODE_IP):10255"
    assert env(ds)["PROXIMA_KUBELET_INSECURE_SKIP_VERIFY"] == "true"


def test_ipv6_nodes_can_bracket_the_node_ip_in_the_kubelet_url(helm: Helm, ci_values):
    ds = helm.template(
        [ci_values["quick-start"]], {"nodeAgent.kubelet.url": "https://[$(NODE_IP)]:10250"}
    ).daemonset
    assert env(ds)["PROXIMA_KUBELET_URL"] == "https://[$(NODE_IP)]:10250"


def test_the_host_identity_is_mounted_read_only_under_host_for_re_bind(quick):
    ds = quick.daemonset
    assert env(ds)["PROXIMA_HOST_ROOT"] == "/host"
    by_path = mounts(ds)
    vols = volumes(ds)
    machine_id = by_path["/host/etc"]
    dmi = by_path["/host/sys/class"]
    assert machine_id["readOnly"] and dmi["readOnly"]
    # Directories every Linux node has: a node without /etc/machine-id or DMI (ARM) still
    # starts the pod (a missing File/Directory hostPath never would).
    assert vols[machine_id["name"]]["hostPath"] == {"path": "/etc", "type": "Directory"}
    assert vols[dmi["name"]]["hostPath"] == {"path": "/sys/class", "type": "Directory"}


def test_host_identity_mounts_can_be_turned_off_whole_or_one_by_one(helm: Helm, ci_values):
    off = helm.template([ci_values["quick-start"]], {"nodeAgent.hostIdentity.enabled": False})
    assert "PROXIMA_HOST_ROOT" not in env(off.daemonset)
    assert not {"/host/etc", "/host/sys/class"} & set(mounts(off.daemonset))
    no_dmi = helm.template([ci_values["quick-start"]], {"nodeAgent.hostIdentity.dmi": False})
    assert "/host/sys/class" not in mounts(no_dmi.daemonset)
    assert "/host/etc" in mounts(no_dmi.daemonset)
    assert "host-dmi" not in volumes(no_dmi.daemonset)


def test_host_metrics_mount_the_hosts_proc_and_sys_read_only(quick):
    ds = quick.daemonset
    variables = env(ds)
    assert variables["PROXIMA_HOST_PROC"] == "/host/proc"
    assert variables["PROXIMA_HOST_SYS"] == "/host/sys"
    vols = volumes(ds)
    for path, host in (("/host/proc", "/proc"), ("/host/sys", "/sys")):
        mount = mounts(ds)[path]
        assert mount["readOnly"] is True
        assert vols[mount["name"]]["hostPath"]["path"] == host


def test_without_host_metrics_the_hosts_proc_and_sys_are_not_mounted(helm: Helm, ci_values):
    ds = helm.template([ci_values["quick-start"]], {"nodeAgent.hostMetrics": False}).daemonset
    variables = env(ds)
    assert variables["PROXIMA_HOST_METRICS"] == "false"
    assert "PROXIMA_HOST_PROC" not in variables and "PROXIMA_HOST_SYS" not in variables
    assert not {"/host/proc", "/host/sys"} & set(mounts(ds))


def test_every_host_path_but_the_data_directory_is_mounted_read_only(quick):
    ds = quick.daemonset
    host_volumes = {name for name, v in volumes(ds).items() if "hostPath" in v}
    assert host_volumes == {"data", "host-proc", "host-sys", "host-machine-id", "host-dmi"}
    host_mounts = [m for m in mounts(ds).values() if m["name"] in host_volumes - {"data"}]
    assert {m["name"] for m in host_mounts} == host_volumes - {"data"}
    for mount in host_mounts:
        assert mount.get("readOnly") is True, mount


def test_the_install_token_is_a_read_only_file_from_the_chart_created_secret(quick):
    ds = quick.daemonset
    mount = mounts(ds)["/etc/proxima/install-token"]
    assert mount["readOnly"] is True
    secret_volume = volumes(ds)[mount["name"]]["secret"]
    assert secret_volume["secretName"] == "proxima-agent-install-token"
    assert secret_volume["items"] == [{"key": "token", "path": "token"}]
    secret = quick.get("Secret", "proxima-agent-install-token")
    assert secret["data"] == {"token": "WU9VUl9JTlNUQUxMX1RPS0VO"}  # YOUR_INSTALL_TOKEN


def test_an_existing_secret_is_mounted_by_its_key_and_no_secret_is_rendered(helm: Helm, ci_values):
    rendering = helm.template(
        [ci_values["existing-secret"]], {"installToken.existingSecret.key": "install-token"}
    )
    assert rendering.all("Secret") == []
    for workload in (rendering.daemonset, rendering.statefulset):
        secret_volume = volumes(workload)["install-token"]["secret"]
        assert secret_volume["secretName"] == "proxima-install-token"
        assert secret_volume["items"] == [{"key": "install-token", "path": "token"}]


def test_the_node_agent_follows_the_pages_security_context(quick):
    security = container(quick.daemonset)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["privileged"] is False
    assert security["runAsUser"] == 0, "root is required for the host's /proc and /sys"
    assert pod_spec(quick.daemonset)["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }


def test_the_node_agent_writes_only_to_its_data_directory_and_a_tmp_emptydir(quick):
    ds = quick.daemonset
    writable = {path for path, m in mounts(ds).items() if not m.get("readOnly")}
    assert writable == {DATA, "/tmp"}
    assert "emptyDir" in volumes(ds)["tmp"]


def test_the_node_agent_pod_is_not_restricted_and_the_checker_says_why(quick):
    """The checker must be able to fail: the node agent needs hostPath and root."""
    problems = restricted_violations(pod_spec(quick.daemonset))
    assert any("hostPath volumes" in p for p in problems)
    assert any("running as non-root" in p for p in problems)
    assert any("non-root user" in p for p in problems)


def test_the_node_agent_probes_hit_readyz_and_livez_on_the_health_port(helm: Helm, ci_values):
    ds = helm.template([ci_values["quick-start"]], {"nodeAgent.healthPort": 9191}).daemonset
    c = container(ds)
    assert c["ports"] == [{"name": "health", "containerPort": 9191, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert env(ds)["PROXIMA_HEALTH_PORT"] == "9191"


def test_the_node_agent_runs_on_every_linux_node_and_tolerates_nothing_by_default(quick):
    spec = pod_spec(quick.daemonset)
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "tolerations" not in spec


def test_the_pages_custom_values_reach_the_node_agent(helm: Helm, ci_values):
    ds = helm.template([ci_values["custom-values"]]).daemonset
    spec = pod_spec(ds)
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert container(ds)["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "400m", "memory": "512Mi"},
    }
    variables = env(ds)
    assert variables["PROXIMA_LOG_LEVEL"] == "info"
    assert variables["PROXIMA_METRICS_INTERVAL"] == "60s"
    assert variables["PROXIMA_HOST_METRICS"] == "true"
    assert variables["PROXIMA_CLUSTER_NAME"] == "production-rke2"


def test_agent_type_is_a_value_the_node_agent_enrolls_with(helm: Helm, ci_values):
    ds = helm.template([ci_values["quick-start"]], {"nodeAgent.agentType": "host"}).daemonset
    assert env(ds)["PROXIMA_AGENT_TYPE"] == "host"


def test_the_image_defaults_to_the_charts_app_version_and_a_digest_wins(helm: Helm, ci_values):
    assert container(helm.template([ci_values["quick-start"]]).daemonset)["image"] == (
        "registry.prxm.uz/proxima/proxima-agent:0.8.0"
    )
    digest = "sha256:" + "a" * 64
    ds = helm.template(
        [ci_values["quick-start"]],
        {"nodeAgent.image.digest": digest, "nodeAgent.image.tag": "0.9.0"},
    ).daemonset
    assert container(ds)["image"] == f"registry.prxm.uz/proxima/proxima-agent@{digest}"


def test_image_pull_secrets_reach_both_agents_as_objects_or_strings(helm: Helm, ci_values):
    rendering = helm.template(
        [ci_values["quick-start"]],
        {"imagePullSecrets[0].name": "regcred", "imagePullSecrets[1]": "other"},
    )
    for workload in (rendering.daemonset, rendering.statefulset):
        assert pod_spec(workload)["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]


def test_the_node_agent_may_read_kubelet_stats_and_nothing_else(quick):
    role = quick.get("ClusterRole", "proxima-agent-node-agent")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}]
    binding = quick.get("ClusterRoleBinding", "proxima-agent-node-agent")
    assert binding["roleRef"]["name"] == "proxima-agent-node-agent"
    sa = pod_spec(quick.daemonset)["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert quick.get("ServiceAccount", sa)


def test_both_agents_may_create_and_patch_events_in_the_release_namespace_only(helm: Helm, quick):
    """The Events on a refused enrollment (agent/kube_events.py): exactly its calls, a Role (never
    a ClusterRole), bound to the agents' ServiceAccounts."""
    from agent.kube_events import EVENT_PERMISSIONS

    role = quick.get("Role", "proxima-agent-events")
    assert role["metadata"]["namespace"] == NAMESPACE
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == EVENT_PERMISSIONS
    assert not any(rule.get("resourceNames") for rule in role["rules"])
    for kind in ("ClusterRole",):
        for other in quick.all(kind):
            assert not [r for r in other["rules"] if "events" in r["resources"]], other
    binding = quick.get("RoleBinding", "proxima-agent-events")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "proxima-agent-events",
    }
    accounts = [pod_spec(w)["serviceAccountName"] for w in (quick.daemonset, quick.statefulset)]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE} for sa in accounts
    ]
    # The pod knows itself, to record on itself.
    variables = env(quick.daemonset)
    assert {"PROXIMA_POD_NAME", "PROXIMA_POD_NAMESPACE", "PROXIMA_POD_UID"} <= set(variables)


def test_node_only_binds_the_events_role_to_the_node_agent_only(helm: Helm, ci_values):
    rendering = helm.template([ci_values["node-only"]])
    binding = rendering.get("RoleBinding", "proxima-agent-events")
    sa = pod_spec(rendering.daemonset)["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_node_only_renders_no_cluster_agent_and_needs_no_cluster_name(helm: Helm, ci_values):
    rendering = helm.template([ci_values["node-only"]])
    assert rendering.daemonset
    assert not [d for d in rendering.documents if "cluster-agent" in d["metadata"]["name"]]
    variables = env(rendering.daemonset)
    assert "PROXIMA_CLUSTER_NAME" not in variables
    assert "PROXIMA_CLUSTER_SLUG" not in variables


def test_without_rbac_create_no_role_or_binding_is_rendered(helm: Helm, ci_values):
    rendering = helm.template([ci_values["quick-start"]], {"rbac.create": False})
    kinds = set(rendering.kinds())
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def test_names_stay_within_63_characters_and_keep_their_component_suffix(helm: Helm, ci_values):
    release = "fleet-agents-for-the-production-cluster-in-tashkent-1"  # helm's maximum: 53
    assert len(release) == 53
    rendering = helm.template([ci_values["quick-start"]], release=release)
    for doc in rendering.documents:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    [ds] = rendering.all("DaemonSet")
    [sts] = rendering.all("StatefulSet")
    assert ds["metadata"]["name"].endswith("-node-agent")
    assert sts["metadata"]["name"].endswith("-cluster-agent")
    # <statefulset>-<10 character hash> is a pod label value: 63 at most.
    assert len(sts["metadata"]["name"]) <= 52
