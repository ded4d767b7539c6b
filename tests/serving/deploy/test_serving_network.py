"""Kubeflow 26.03 with NetworkPolicy enforced: the deploy step in a profile namespace reaches
the model it deployed only once ``manifests/serving-network`` is applied. The stand-in network
(``tests.standins.network``) admits a connection only where the stored NetworkPolicies allow:
26.03's istio-system policies (kubeflow/manifests 26.03 common/istio/istio-namespace/base)
admit nothing from ``team-a`` to the cluster-local gateway on port 8081, which every
Serverless predictor's cluster-local address leads to."""

from __future__ import annotations

import pytest

from tests.serving.deploy import test_kserve_end_to_end as end_to_end
from tests.setup_manifests import build
from tests.standins.network import install_kubeflow_2603

pytestmark = pytest.mark.slow
# test_kserve_end_to_end's fixtures: the model artifacts, the model servers, the test split.
models, cluster, data_dir = end_to_end.models, end_to_end.cluster, end_to_end.data_dir
run_deploy, standin_for = end_to_end.run_deploy, end_to_end.standin_for
PROFILE = "team-a"


def _profile_setup(standin) -> None:
    install_kubeflow_2603(standin, PROFILE)
    for base in ("serving-credentials", "serving-access"):
        for obj in build(base, namespace=PROFILE):
            standin.put(obj)


def test_deploy_from_a_profile_needs_the_gateway_network_policy(
        cluster, data_dir, models, monkeypatch):
    backend, _ = cluster
    with standin_for("Serverless", backend) as standin, standin.network() as network:
        monkeypatch.setenv("HTTP_PROXY", network.url)
        network.source_namespace = PROFILE
        _profile_setup(standin)
        # The model is never reached: the proxy drops every connection to the gateway.
        with pytest.raises(Exception, match="failed verification.*Server disconnected"):
            run_deploy(standin, models, data_dir, "1", 0.80, namespace=PROFILE)
        assert network.dropped  # the connections to the gateway were dropped
        assert all(uri is None for _, _, uri in network.requests)

        for obj in build("serving-network"):
            standin.put(obj)
        network.dropped.clear()
        done = run_deploy(standin, models, data_dir, "1", 0.80, namespace=PROFILE)
        assert done.verification.passed and not network.dropped

