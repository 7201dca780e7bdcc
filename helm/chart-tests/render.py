#!/usr/bin/env python3
"""Render (and optionally lint) the openshell-gateway chart offline with Helm's
own library (PyPI helm-python-sdk, which bundles Helm v4; no cluster, no helm
binary). Used by the helm-chart-tests crate; runnable by hand:

    echo '{"values": {"gateway": {"replicas": 5}}}' | \
      /opt/openshell-test-venv/bin/python helm/chart-tests/render.py

stdin, one JSON object (every field optional):
    chart      chart directory (default: helm/openshell-gateway next to this file)
    values     values overriding the chart's values.yaml
    name       release name (default "rel"); namespace (default "openshell")
    lint       also run `helm lint --strict` with these values (kube_version below)
    kube_version  default "v1.30.0"
stdout, one JSON object:
    objects    every rendered Kubernetes object, in template order (hooks included)
    notes      the rendered NOTES.txt
    lint       the lint report when asked: {"messages": [...], "errors": [...]}
On a render error (schema violation, `fail` in a template): exit 1, the error
on stderr.
"""
import json
import os
import sys

import yaml
import helm_python as helm


def main() -> int:
    req = json.load(sys.stdin)
    here = os.path.dirname(os.path.abspath(__file__))
    chart_dir = req.get("chart") or os.path.join(here, "..", "openshell-gateway")
    values = req.get("values") or {}
    out = {}
    try:
        with helm.Chart.load(chart_dir) as chart:
            chart.validate_schema(values)
            rendered = chart.render(
                values,
                name=req.get("name", "rel"),
                namespace=req.get("namespace", "openshell"),
                is_install=True,
            )
    except helm.HelmError as e:
        print(f"render.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    objects = []
    for path in sorted(rendered):
        text = rendered[path]
        if path.endswith("NOTES.txt"):
            out["notes"] = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    out["objects"] = objects
    if req.get("lint"):
        report = helm.lint(
            chart_dir,
            values,
            strict=True,
            namespace=req.get("namespace", "openshell"),
            kube_version=req.get("kube_version", "v1.30.0"),
        )
        out["lint"] = report
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
