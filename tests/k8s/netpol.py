"""Whether NetworkPolicy objects let one pod reach another: Kubernetes' rules for them, applied
to the objects a real API server holds. The tier runs no network plugin (kwok pods have no
network), so this is as far as policies can be checked here; a cluster enforces them only with
a plugin that implements NetworkPolicy.

The rules: a pod is isolated for a direction when some policy of its namespace selects it with
that policy type; an isolated pod admits what some selecting policy's rule allows; a connection
needs the source's egress and the destination's ingress.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels) or an address outside the cluster (namespace None)."""

    ip: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def selects(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A label selector; an empty one selects everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


class Policies:
    """The NetworkPolicies of some namespaces, and the labels of those namespaces."""

    def __init__(self, policies: list[Obj], namespace_labels: dict[str, dict[str, str]]) -> None:
        self.policies = policies
        self.namespace_labels = namespace_labels

    def allows(self, source: Endpoint, destination: Endpoint, port: int) -> bool:
        return self._admits("Egress", source, destination, port) and self._admits(
            "Ingress", destination, source, port
        )

    def _admits(self, direction: str, pod: Endpoint, peer: Endpoint, port: int) -> bool:
        """Whether `pod`'s policies let traffic with `peer` through in `direction`."""
        if pod.namespace is None:  # outside the cluster: no policy of ours applies
            return True
        selecting = [
            p
            for p in self.policies
            if p["metadata"]["namespace"] == pod.namespace
            and selects(p["spec"].get("podSelector"), pod.labels)
            and direction in _types(p)
        ]
        if not selecting:
            return True  # not isolated
        key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
        return any(
            _port_matches(rule.get("ports"), port)
            and (
                not rule.get(peers_key) or any(self._peer(p, peer, policy) for p in rule[peers_key])
            )
            for policy in selecting
            for rule in policy["spec"].get(key) or []
        )

    def _peer(self, peer_rule: Obj, peer: Endpoint, policy: Obj) -> bool:
        if "ipBlock" in peer_rule:
            block = peer_rule["ipBlock"]
            address = ipaddress.ip_address(peer.ip)
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(cidr) for cidr in block.get("except") or []
            )
        if peer.namespace is None:
            return False
        if "namespaceSelector" in peer_rule:
            labels = self.namespace_labels.get(peer.namespace, {})
            if not selects(peer_rule["namespaceSelector"], labels):
                return False
        elif peer.namespace != policy["metadata"]["namespace"]:
            return False
        return "podSelector" not in peer_rule or selects(peer_rule["podSelector"], peer.labels)


def _types(policy: Obj) -> list[str]:
    spec = policy["spec"]
    types = spec.get("policyTypes")
    if types:
        return list(types)
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _port_matches(ports: list[Obj] | None, port: int) -> bool:
    return not ports or any(int(p.get("port", port)) == port for p in ports)
