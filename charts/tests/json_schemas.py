#!/usr/bin/env python3
"""Writes kubeconform's standalone strict JSON schemas, offline.

    json_schemas.py openapi OPENAPI_V2_JSON OUT_DIR   every kind a kube-apiserver serves
    json_schemas.py crd CRD_YAML OUT_DIR              every version of a CustomResourceDefinition

One file per kind and version, named as kubeconform looks them up
(`{{ .ResourceKind }}{{ .KindSuffix }}.json`: pod-v1.json, deployment-apps-v1.json,
leadergroup-leadergroup-v1alpha1.json). "Standalone": every $ref is inlined, since kubeconform
reads one file per kind; a definition that refers to itself (JSONSchemaProps in a CRD) is left
open ({}) at the point of recursion. "Strict": every object with properties and no
additionalProperties refuses unknown keys, so a misspelt field fails as the API server's strict
field validation would. The OpenAPI v2 document spells IntOrString and Quantity as strings;
YAML writes both as numbers too (`targetPort: 8080`, `cpu: 1`), so they accept either.
"""
import json
import sys

import yaml

# Definitions whose OpenAPI v2 spelling is narrower than what the API server accepts.
WIDENED = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}
REF_PREFIX = "#/definitions/"


def file_name(group, version, kind):
    suffix = f"-{group.split('.')[0].lower()}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def strict(schema):
    """Refuses unknown keys in every object that lists its properties (CRD schemas too)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def inline(schema, definitions, stack):
    """The schema with every $ref replaced by its definition; a recursion is left open."""
    if isinstance(schema, list):
        return [inline(value, definitions, stack) for value in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    # JSONSchemaProps has a property named $ref: a schema there, not a reference.
    if isinstance(ref, str):
        name = ref[len(REF_PREFIX):]
        if name in WIDENED:
            return dict(WIDENED[name])
        if name in stack:
            return {}
        return inline(definitions[name], definitions, stack | {name})
    return {key: inline(value, definitions, stack) for key, value in schema.items()}


def from_openapi(document, out):
    definitions = document["definitions"]
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            schema = strict(inline(definition, definitions, {name}))
            schema["$schema"] = "http://json-schema.org/schema#"
            with open(f"{out}/{file_name(gvk['group'], gvk['version'], gvk['kind'])}", "w") as f:
                json.dump(schema, f)
            written += 1
    return written


def from_crd(crd, out):
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    written = 0
    for version in crd["spec"]["versions"]:
        schema = strict(json.loads(json.dumps(version["schema"]["openAPIV3Schema"])))
        # The API server adds metadata's schema to every custom resource; kubeconform checks the
        # rest, as the CRD declares it.
        schema.setdefault("properties", {})["metadata"] = {"type": "object"}
        schema["$schema"] = "http://json-schema.org/schema#"
        with open(f"{out}/{file_name(group, version['name'], kind)}", "w") as f:
            json.dump(schema, f)
        written += 1
    return written


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("openapi", "crd"):
        sys.exit(__doc__)
    what, source, out = sys.argv[1:]
    with open(source) as f:
        written = from_openapi(json.load(f), out) if what == "openapi" else from_crd(yaml.safe_load(f), out)
    if not written:
        sys.exit(f"json_schemas.py: no kind found in {source}")
    print(f"json_schemas.py: {written} schemas from {source}", file=sys.stderr)


if __name__ == "__main__":
    main()
