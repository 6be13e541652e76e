"""Validates Kubernetes manifests offline against the API's schema as
Debian's python3-kubernetes carries it (its models are generated from the
Kubernetes OpenAPI specification, release 1.22): every field must exist in
its object, with the right type, and required fields must be present
(the models refuse to be built without them). Debian packages no kubeconform
or kubeval, and kubectl's validation needs a cluster.

Objects of other API groups (ServiceMonitor, Prometheus Operator's custom
resource) have no schema here and are only reported, except the pod
templates inside a Kubeflow MPIJob (spec.mpiReplicaSpecs.*.template), which
are core PodTemplateSpecs and are checked as such. FIELD_TYPES corrects the
schema where the models' is narrower than the API's or older than it.

Usage: k8s_schema_check.py MANIFEST.yaml...
"""
import re
import sys

import yaml
from kubernetes import client

FIELD_TYPES = {
    # Native gRPC probes: beta in Kubernetes 1.24, GA in 1.27.
    "V1Probe": {"grpc": {"port": "int", "service": "str"}},
    # The models type resource.Quantity as a string; the API also takes a
    # number (`nvidia.com/gpu: 1`).
    "V1ResourceRequirements": {"limits": "dict(str, quantity)",
                               "requests": "dict(str, quantity)"},
}
SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float),
           "quantity": (str, int, float)}


def check(value, type_name, path, errors):
    """Appends "path: problem" for every mismatch of value with type_name."""
    if isinstance(type_name, dict):  # a FIELD_TYPES schema
        if not isinstance(value, dict):
            errors.append("%s: expected an object" % path)
            return
        for key, sub in value.items():
            if key not in type_name:
                errors.append("%s.%s: no such field" % (path, key))
            else:
                check(sub, type_name[key], "%s.%s" % (path, key), errors)
        return
    if type_name == "object":  # IntOrString and free-form fields
        return
    if type_name == "datetime":
        if not isinstance(value, str):
            errors.append("%s: expected a timestamp" % path)
        return
    if type_name in SCALARS:
        # bool is an int in Python: keep them apart.
        if not isinstance(value, SCALARS[type_name]) or (
                type_name != "bool" and isinstance(value, bool)):
            errors.append("%s: expected %s, got %r" % (path, type_name, value))
        return
    m = re.fullmatch(r"list\[(.+)\]", type_name)
    if m:
        if not isinstance(value, list):
            errors.append("%s: expected a list" % path)
            return
        for i, item in enumerate(value):
            check(item, m.group(1), "%s[%d]" % (path, i), errors)
        return
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            errors.append("%s: expected a map" % path)
            return
        for key, item in value.items():
            check(item, m.group(1), "%s.%s" % (path, key), errors)
        return
    model = getattr(client, type_name)
    if not isinstance(value, dict):
        errors.append("%s: expected a %s object" % (path, type_name))
        return
    fields = {model.attribute_map[a]: t for a, t in model.openapi_types.items()}
    fields.update(FIELD_TYPES.get(type_name, {}))
    for key, sub in value.items():
        if key not in fields:
            errors.append("%s.%s: no such field in %s" % (path, key, type_name))
        else:
            check(sub, fields[key], "%s.%s" % (path, key), errors)


def validate_mpijob_templates(doc):
    """Errors of an MPIJob's pod templates (the rest is the CRD's)."""
    errors = []
    for name, replica in doc.get("spec", {}).get("mpiReplicaSpecs", {}).items():
        path = "MPIJob.spec.mpiReplicaSpecs.%s.template" % name
        check(replica.get("template"), "V1PodTemplateSpec", path, errors)
        if not errors:
            try:
                client.ApiClient()._ApiClient__deserialize(
                    replica["template"], "V1PodTemplateSpec")
            except ValueError as e:
                errors.append("%s: %s" % (path, e))
    return errors


def validate(doc):
    """Errors of one manifest object, or None when there is no schema."""
    group_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    if group_version.startswith("kubeflow.org/") and kind == "MPIJob":
        return validate_mpijob_templates(doc)
    version = group_version.split("/")[-1]
    type_name = version[:1].upper() + version[1:] + kind
    if group_version.split("/")[0] not in ("v1", "apps", "policy") or \
            not hasattr(client, type_name):
        return None
    errors = []
    check(doc, type_name, kind, errors)
    if not errors:
        # Required fields: the generated models raise ValueError without them.
        try:
            client.ApiClient()._ApiClient__deserialize(doc, type_name)
        except ValueError as e:
            errors.append("%s: %s" % (kind, e))
    return errors


def main():
    failed = False
    for path in sys.argv[1:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for doc in docs:
            what = "%s %s/%s" % (path, doc.get("apiVersion"), doc.get("kind"))
            if doc.get("kind") == "Kustomization":
                continue  # kustomize's own file, not an API object
            errors = validate(doc)
            if errors is None:
                print("k8s_schema_check: %s: no schema offline, parsed only" % what)
            elif errors:
                failed = True
                for e in errors:
                    print("k8s_schema_check: %s: %s" % (what, e), file=sys.stderr)
            elif doc.get("kind") == "MPIJob":
                print("k8s_schema_check: %s: pod templates valid (the rest is a"
                      " custom resource, parsed only)" % what)
            else:
                print("k8s_schema_check: %s: valid" % what)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
