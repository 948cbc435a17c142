"""Structural checks for what the Kubernetes schemas do not cover.

`check_resources.py RENDERED.yaml`: every PodMonitor selects pods and names a port the
Deployment's containers declare; every Deployment's probes use declared ports. The
gateway's Deployment works as shipped and its admin side is locked: a writable emptyDir
(with a sizeLimit) at /tmp under a read-only root filesystem (uploads over 1 MiB spool
there); no Service exposes the admin port; a NetworkPolicy selects the gateway's pods,
opens the admin port only to a `from` that names its peers, and opens no other port but
the API's; the gateway.yaml of the ConfigMap binds admin_listen beyond loopback only with
admin_tokens.
`check_resources.py --rules alerts.yaml`: every rule has an alert name, an expression, a
severity label and a summary.
"""

import ipaddress
import sys

import yaml


def fail(message):
    print(f"ERROR {message}")
    return 1


def check_manifests(path):
    documents = [d for d in yaml.safe_load_all(open(path)) if d]
    errors = 0
    ports = set()
    for doc in documents:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for port in container.get("ports", []):
                    ports.add(port["name"])
    for doc in documents:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                    port = container.get(probe, {}).get("httpGet", {}).get("port")
                    if isinstance(port, str) and port not in ports:
                        errors += fail(f"{path}: {name}/{container['name']} {probe} uses undeclared port {port}")
        elif kind == "PodMonitor":
            spec = doc.get("spec", {})
            if not spec.get("selector", {}).get("matchLabels"):
                errors += fail(f"{path}: PodMonitor {name} selects no pods")
            endpoints = spec.get("podMetricsEndpoints") or []
            if not endpoints:
                errors += fail(f"{path}: PodMonitor {name} has no podMetricsEndpoints")
            for endpoint in endpoints:
                if ports and endpoint.get("port") not in ports:
                    errors += fail(f"{path}: PodMonitor {name} scrapes undeclared port {endpoint.get('port')}")
                if endpoint.get("path") != "/metrics":
                    errors += fail(f"{path}: PodMonitor {name} must scrape /metrics")
            if doc["apiVersion"] != "monitoring.coreos.com/v1":
                errors += fail(f"{path}: PodMonitor {name} has apiVersion {doc['apiVersion']}")
    errors += check_gateway_pods(path, documents)
    print(f"ok  {path}: {len(documents)} resources")
    return errors


def gateway_container(deployment):
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        if any(p.get("name") == "admin" for p in container.get("ports", [])):
            return container
    return None


def check_gateway_pods(path, documents):
    """The emptyDir at /tmp, the admin port's exposure and the admin binding."""
    errors = 0
    deployments = [d for d in documents if d["kind"] == "Deployment" and gateway_container(d)]
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        spec = deployment["spec"]["template"]["spec"]
        container = gateway_container(deployment)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        tmp = mounts.get("/tmp")
        volume = volumes.get(tmp["name"]) if tmp else None
        read_only_root = container.get("securityContext", {}).get("readOnlyRootFilesystem")
        if read_only_root and (volume is None or "emptyDir" not in volume or tmp.get("readOnly")):
            errors += fail(f"{path}: {name}: a read-only root needs a writable emptyDir at /tmp (uploads spool there)")
        elif volume is not None and not (volume["emptyDir"] or {}).get("sizeLimit"):
            errors += fail(f"{path}: {name}: the /tmp emptyDir needs a sizeLimit")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        admin_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "admin")
        api_ports = {p["name"] for p in container["ports"] if p["name"] != "admin"} | {
            p["containerPort"] for p in container["ports"] if p["name"] != "admin"}
        policies = [d for d in documents if d["kind"] == "NetworkPolicy"
                    and selects(d["spec"].get("podSelector", {}), labels)]
        if not policies:
            errors += fail(f"{path}: {name}: no NetworkPolicy selects the gateway's pods")
        for policy in policies:
            pname = policy["metadata"]["name"]
            if "Ingress" not in policy["spec"].get("policyTypes", []):
                errors += fail(f"{path}: NetworkPolicy {pname} does not restrict ingress")
            for rule in policy["spec"].get("ingress", []):
                ports = [p.get("port") for p in rule.get("ports", [])]
                if not ports:
                    errors += fail(f"{path}: NetworkPolicy {pname} has a rule for every port")
                for port in ports:
                    if port in ("admin", admin_port):
                        if not rule.get("from"):
                            errors += fail(f"{path}: NetworkPolicy {pname} opens the admin port to everyone")
                    elif port not in api_ports:
                        errors += fail(f"{path}: NetworkPolicy {pname} opens port {port}, which is not the API's")
        for service in (d for d in documents if d["kind"] == "Service"):
            if selects({"matchLabels": service["spec"].get("selector", {})}, labels):
                for port in service["spec"].get("ports", []):
                    if port.get("targetPort") in ("admin", admin_port):
                        errors += fail(f"{path}: Service {service['metadata']['name']} exposes the admin port")
    for config_map in (d for d in documents if d["kind"] == "ConfigMap"):
        text = (config_map.get("data") or {}).get("gateway.yaml")
        if text is None:
            continue
        config = yaml.safe_load(text) or {}
        host = str(config.get("admin_listen", "127.0.0.1:9090")).rsplit(":", 1)[0].strip("[]")
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        if not loopback and not (config.get("admin_tokens") or config.get("admin_token_env")):
            errors += fail(f"{path}: ConfigMap {config_map['metadata']['name']}: admin_listen {host} is beyond loopback without admin_tokens")
    return errors


def selects(selector, labels):
    wanted = selector.get("matchLabels", {})
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())


def check_rules(path):
    errors = 0
    groups = yaml.safe_load(open(path))["groups"]
    count = 0
    for group in groups:
        for rule in group["rules"]:
            count += 1
            name = rule.get("alert", "?")
            for field in ("alert", "expr"):
                if not rule.get(field):
                    errors += fail(f"{path}: rule {name} has no {field}")
            if rule.get("labels", {}).get("severity") not in ("info", "warning", "critical"):
                errors += fail(f"{path}: rule {name} needs a severity of info, warning or critical")
            if not rule.get("annotations", {}).get("summary"):
                errors += fail(f"{path}: rule {name} has no summary")
            if "sluice_" not in rule.get("expr", ""):
                errors += fail(f"{path}: rule {name} uses no sluice_ series")
    print(f"ok  {path}: {count} rules")
    return errors


if __name__ == "__main__":
    if sys.argv[1] == "--rules":
        sys.exit(1 if check_rules(sys.argv[2]) else 0)
    sys.exit(1 if check_manifests(sys.argv[1]) else 0)
