"""Validation runs under `helm template`, so an Argo CD sync fails with a clear message.

Every problem is reported in one message: `required` would stop at the first, and `helm lint`
does not fail on missing values at all.
"""

from __future__ import annotations

import pytest

from testkit.chart import Helm, RenderError

VALID = {
    "backendUrl": "https://api-console.prxm.uz",
    "installToken.value": "YOUR_INSTALL_TOKEN",
    "clusterAgent.clusterName": "my-cluster",
}

BACKEND_REQUIRED = (
    "backendUrl is required: the Proxima Console backend URL, "
    "e.g. --set backendUrl=https://api-console.prxm.uz"
)
TOKEN_REQUIRED = (
    "an install token is required: set installToken.value, or installToken.existingSecret.name "
    "and installToken.existingSecret.key to read it from an existing Secret"
)
CLUSTER_NAME_REQUIRED = (
    "clusterAgent.clusterName is required when clusterAgent.enabled is true: "
    "the cluster's display name in the Console"
)


def test_missing_values_are_all_reported_in_one_message(helm: Helm):
    message = helm.template_error()
    assert "proxima-agent: 3 invalid value(s):" in message
    assert f"  - {BACKEND_REQUIRED}\n" in message
    assert f"  - {TOKEN_REQUIRED}\n" in message
    assert f"  - {CLUSTER_NAME_REQUIRED}\n" in message


ERRORS = {
    "backendUrl missing": (
        {"backendUrl": ""},
        BACKEND_REQUIRED,
    ),
    "backendUrl not http": (
        {"backendUrl": "api-console.prxm.uz"},
        'backendUrl must be an https:// or http:// URL, got "api-console.prxm.uz"',
    ),
    "no install token": (
        {"installToken.value": ""},
        TOKEN_REQUIRED,
    ),
    "two install tokens": (
        {"installToken.existingSecret.name": "proxima-install-token"},
        "installToken.value and installToken.existingSecret.name are both set: use one of them",
    ),
    "existing secret without key": (
        {
            "installToken.value": "",
            "installToken.existingSecret.name": "proxima-install-token",
            "installToken.existingSecret.key": "",
        },
        "installToken.existingSecret.key is required with installToken.existingSecret.name: "
        'the key in Secret "proxima-install-token" that holds the token',
    ),
    "no cluster name": (
        {"clusterAgent.clusterName": ""},
        CLUSTER_NAME_REQUIRED,
    ),
    "slug too long": (
        {"clusterAgent.clusterSlug": "a" * 64},
        f'clusterAgent.clusterSlug "{"a" * 64}" is not a DNS label: use at most 63 lowercase '
        "letters, digits and '-', starting and ending with a letter or digit",
    ),
    "slug with capitals": (
        {"clusterAgent.clusterSlug": "Production"},
        'clusterAgent.clusterSlug "Production" is not a DNS label',
    ),
    "slug starting with a dash": (
        {"clusterAgent.clusterSlug": "-prod"},
        'clusterAgent.clusterSlug "-prod" is not a DNS label',
    ),
    "slug with a dot": (
        {"clusterAgent.clusterSlug": "prod.eu"},
        'clusterAgent.clusterSlug "prod.eu" is not a DNS label',
    ),
    "name with nothing to slug": (
        {"clusterAgent.clusterName": "---"},
        'clusterAgent.clusterName "---" has no letter or digit to derive a slug from: '
        "set clusterAgent.clusterSlug",
    ),
    "ha without persistence": (
        {"clusterAgent.replicas": 2, "clusterAgent.persistence.enabled": False},
        "clusterAgent.replicas is 2 but clusterAgent.persistence.enabled is false: high "
        "availability needs one PVC per replica for a stable identity",
    ),
    "relative host data dir": (
        {"nodeAgent.hostDataDir": "var/lib/proxima-node-agent"},
        'nodeAgent.hostDataDir must be a clean absolute path other than "/" '
        '(like /var/lib/proxima-node-agent), got "var/lib/proxima-node-agent"',
    ),
    "host root as data dir": (
        {"nodeAgent.hostDataDir": "/"},
        'nodeAgent.hostDataDir must be a clean absolute path other than "/"',
    ),
    "unclean host data dir": (
        {"nodeAgent.hostDataDir": "/var/lib/../lib/proxima-agent"},
        'got "/var/lib/../lib/proxima-agent"',
    ),
    "nothing enabled": (
        {"nodeAgent.enabled": False, "clusterAgent.enabled": False},
        "nodeAgent.enabled and clusterAgent.enabled are both false: nothing to deploy",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_each_invalid_value_fails_the_render_with_its_message(helm: Helm, case: str):
    overrides, expected = ERRORS[case]
    message = helm.template_error(set_values={**VALID, **overrides})
    assert "proxima-agent: 1 invalid value(s):" in message
    assert expected in message


def test_a_set_slug_of_exactly_63_characters_is_accepted(helm: Helm):
    slug = "a" + "-b" * 31
    assert len(slug) == 63
    helm.template(set_values={**VALID, "clusterAgent.clusterSlug": slug})


def test_cluster_name_is_not_required_when_the_cluster_agent_is_disabled(helm: Helm):
    helm.template(
        set_values={**VALID, "clusterAgent.clusterName": "", "clusterAgent.enabled": False}
    )


def test_a_cluster_only_install_does_not_check_the_node_agents_host_data_dir(helm: Helm):
    helm.template(set_values={**VALID, "nodeAgent.enabled": False, "nodeAgent.hostDataDir": "/"})


def test_validation_errors_come_from_helm_template_not_from_notes(helm: Helm):
    """DataDog's habit, avoided: a broken configuration must fail, not deploy with a warning."""
    message = helm.template_error(set_values={**VALID, "backendUrl": ""})
    assert "execution error" in message


SCHEMA_ERRORS = {
    "a mistyped key": ({"nodeAgent.hostDataDr": "/x"}, "additional properties 'hostDataDr'"),
    "a duration without a unit": (
        {"nodeAgent.metricsInterval": "60"},
        "/nodeAgent/metricsInterval",
    ),
    "an unknown log level": ({"clusterAgent.logLevel": "verbose"}, "/clusterAgent/logLevel"),
    "an unknown agent type": (
        {"nodeAgent.agentType": "k8s-cluster-collector"},
        "/nodeAgent/agentType",
    ),
    "zero replicas": ({"clusterAgent.replicas": 0}, "/clusterAgent/replicas"),
    "a bad excluded namespace": (
        {"clusterAgent.excludeNamespaces": "{Kube_System}"},
        "/clusterAgent/excludeNamespaces/0",
    ),
    "a token given as a number": ({"installToken.value": 12345678}, "/installToken/value"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_ERRORS))
def test_values_schema_rejects(helm: Helm, case: str):
    overrides, where = SCHEMA_ERRORS[case]
    message = helm.template_error(set_values={**VALID, **overrides})
    assert "values don't meet the specifications of the schema" in message
    assert where in message


def test_kubernetes_older_than_1_26_is_refused(helm: Helm, ci_values):
    with pytest.raises(RenderError, match=r"chart requires kubeVersion: >=1\.26\.0-0"):
        helm.template([ci_values["quick-start"]], kube_version="1.25.16")
    helm.template([ci_values["quick-start"]], kube_version="1.26.0")
