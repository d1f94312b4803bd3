"""The Kubernetes path on paper (jupyter/kubernetes/values.yaml), checked as far as it can be without a cluster.

helm validates the chart's default values, with a values file merged over them, against the chart's values schema
(the chart ships it as values.schema.json, its YAML schema less the "description" keys). These tests do the same
with the chart version the file is written for (jupyter/kubernetes/z2jh-4.4.0/, with its licence), check that
values the schema must refuse are refused (so that the check can fail), and run the hub's extra configuration
(hub.extraConfig) against stand-in spawners: instructors get their settings and the grading pod, students neither.
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import yaml
from notebooks import ROOT
from traitlets.config import Config

KUBERNETES = ROOT / "jupyter" / "kubernetes"
CHART = KUBERNETES / "z2jh-4.4.0"


def _without_descriptions(node):
    """The chart's tools/generate-json-schema.py: the YAML schema less every "description" key."""
    if isinstance(node, dict):
        return {key: _without_descriptions(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [_without_descriptions(item) for item in node]
    return node


def _merged(defaults, values):
    """Helm's merge of a values file over the chart's defaults: maps merge key by key, anything else replaces,
    and null deletes the key."""
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _overlaid(values, change):
    """``values`` with ``change`` written into it, nulls kept (for helm to apply)."""
    values = copy.deepcopy(values)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = _overlaid(values[key], value)
        else:
            values[key] = value
    return values


def _load(path: Path):
    return yaml.safe_load(path.read_text())


def _errors(values) -> list[str]:
    schema = _without_descriptions(_load(CHART / "values.schema.yaml"))
    validator = jsonschema.Draft7Validator(schema)
    merged = _merged(_load(CHART / "values.yaml"), values)
    return [f"{'.'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(merged)]


def test_the_chart_version_and_licence_are_kept_with_its_schema():
    sources = (CHART / "SOURCES.md").read_text()
    assert "4.4.0" in sources and "BSD 3-Clause" in sources
    assert "Redistribution and use in source and binary forms" in (CHART / "LICENSE").read_text()
    assert (
        "helm upgrade --install" in (KUBERNETES / "values.yaml").read_text()
        and "--version 4.4.0" in (KUBERNETES / "values.yaml").read_text()
    )


def test_the_values_file_passes_the_charts_schema():
    assert _errors(_load(KUBERNETES / "values.yaml")) == []


@pytest.mark.parametrize(
    "broken",
    [
        {"singleuser": {"imagee": {"name": "x"}}},  # a misspelt key
        {"singleuser": {"storage": {"type": "nfs"}}},  # not one of dynamic, static, none
        {"singleuser": {"image": {"name": ["not", "a", "string"]}}},
        {"hub": None},  # a required section removed
    ],
    ids=["misspelt key", "unknown storage type", "wrong type", "required section removed"],
)
def test_the_check_refuses_what_the_chart_refuses(broken):
    values = _overlaid(_load(KUBERNETES / "values.yaml"), broken)
    assert _errors(values), f"the schema accepted {broken}"


def test_the_values_use_the_course_image_a_shared_exchange_and_a_real_login():
    values = _load(KUBERNETES / "values.yaml")
    single = values["singleuser"]
    assert single["image"]["name"].endswith("/transformer-course") and single["image"]["tag"] != "latest"
    mounts = {m["name"]: m["mountPath"] for m in single["storage"]["extraVolumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in single["storage"]["extraVolumes"]}
    exchange = mounts["nbgrader-exchange"]
    assert claims == {"nbgrader-exchange": "nbgrader-exchange"}
    assert single["extraEnv"]["COURSE_EXCHANGE"] == exchange
    assert f'c.Exchange.root = "{exchange}"' in single["extraFiles"]["nbgrader-config"]["stringData"]
    hub = values["hub"]["config"]
    assert hub["JupyterHub"]["authenticator_class"] not in ("dummy", "null", None)
    assert hub["Authenticator"]["admin_users"] == []
    # Binder's image is the one the values name: its postBuild installs the students' settings into it.
    assert "tools/student_settings.py" in (ROOT / "binder" / "postBuild").read_text()


def _spawner(*groups: str):
    user = SimpleNamespace(name="someone", groups=[SimpleNamespace(name=g) for g in groups])
    return SimpleNamespace(
        user=user,
        environment={"COURSE_EXCHANGE": "/srv/nbgrader/exchange"},
        privileged=False,
        allow_privilege_escalation=False,
        node_selector={},
        tolerations=[],
    )


def test_the_hubs_extra_configuration_gives_instructors_their_tools_and_the_grading_pod():
    code = _load(KUBERNETES / "values.yaml")["hub"]["extraConfig"]["course.py"]
    c = Config()
    exec(compile(code, "hub.extraConfig.course.py", "exec"), {"c": c, "get_config": lambda: c})
    hook = c.KubeSpawner.pre_spawn_hook
    instructor, student = _spawner("course-instructors"), _spawner("course-students")
    hook(instructor)
    hook(student)
    instructors = instructor.environment["JUPYTER_CONFIG_PATH"]
    assert instructors.endswith("/jupyter/hub/instructors") and (ROOT / "jupyter" / "hub" / "instructors").is_dir()
    assert instructor.privileged and instructor.node_selector and instructor.tolerations
    assert student.environment == {"COURSE_EXCHANGE": "/srv/nbgrader/exchange"}
    assert not student.privileged and not student.node_selector and not student.tolerations
