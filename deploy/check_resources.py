"""Structural checks for what the Kubernetes schemas do not cover.

`check_resources.py RENDERED.yaml`: every PodMonitor selects pods and names a port the
Deployment's containers declare; every Deployment's probes use declared ports.
`check_resources.py --rules alerts.yaml`: every rule has an alert name, an expression, a
severity label and a summary.
"""

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
    print(f"ok  {path}: {len(documents)} resources")
    return errors


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
