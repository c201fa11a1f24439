"""The DaemonSet the docs give is a file (deploy/kubernetes/runbook-gpu-health.yaml), valid
against the Kubernetes OpenAPI schema (kubernetes-validate ships it as JSON schemas, checked
here with jsonschema, strict: an unknown field is an error), and its container only checks,
read-only (issue 35, item 3)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed: pip install -e '.[test]'"
)

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "deploy" / "kubernetes" / "runbook-gpu-health.yaml"
PAGE = REPO / "docs" / "engines" / "kubernetes.md"
# The oldest and the newest Kubernetes the package has schemas for, and one between.
VERSIONS = ["1.25", "1.30", kubernetes_validate.utils.latest_version()]


def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


@pytest.mark.parametrize("version", VERSIONS)
def test_the_daemonset_is_valid_against_the_kubernetes_schema(version):
    assert kubernetes_validate.validate(manifest(), version, strict=True)


def test_the_schema_check_catches_a_misspelt_field():
    broken = manifest()
    context = broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    context["readOnlyRootFileSystem"] = context.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_its_container_checks_the_node_read_only():
    pod = manifest()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    script = " ".join(container["args"])
    commands = [shlex.split(part) for part in re.split(r"[;\n]| do | done", script)]
    runbooks = [words for words in commands if words and words[0] == "runbook"]
    assert runbooks == [
        ["runbook", "check", "gpu-node-health", "--local", "--prometheus", "/textfile/runbook.prom"]
    ]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context.get("privileged", False) is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"].get("add", [])) <= {"SYSLOG"}
    # Only the textfile folder and a scratch folder are writable; nothing of the node's but
    # the textfile folder is mounted.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts) == set(volumes) == {"textfile", "scratch"}
    assert volumes["textfile"]["hostPath"]["path"] == "/var/lib/node_exporter/textfile"
    assert "emptyDir" in volumes["scratch"]
    assert pod["automountServiceAccountToken"] is False


def test_the_docs_page_shows_the_file_as_it_is():
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert MANIFEST.read_text() in blocks
    assert "deploy/kubernetes/runbook-gpu-health.yaml" in PAGE.read_text()
