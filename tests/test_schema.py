"""The scenario JSON Schema for editors: `fabricjax schema` prints it from the models (the
policies' sections from the registry), `scenarios/schema.json` is that output committed, every
bundled scenario names it on its first line and validates against it, and what the schema
refuses the loader refuses too."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from fabricjax.core.errors import ScenarioError
from fabricjax.core.registry import known_names
from fabricjax.scenario import SafeLoader, parse_scenario
from fabricjax_cli.main import app

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "scenarios" / "schema.json"
HEADER = "# yaml-language-server: $schema=schema.json"
BUNDLED = sorted((REPO / "scenarios").glob("*.yaml"))


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_what_the_command_prints():
    """Regenerate with `fabricjax schema > scenarios/schema.json`."""
    out = CliRunner().invoke(app, ["schema"])
    assert out.exit_code == 0, out.output
    assert out.output == SCHEMA.read_text()
    schema = json.loads(out.output)
    for name in known_names():     # every registered policy's section, and its name
        assert name in schema["properties"]["policies"]["items"]["enum"]
    assert {"mrc", "spray", "ecmp", "optimal"} <= set(schema["properties"])


def test_every_field_has_a_description():
    schema = json.loads(SCHEMA.read_text())
    models = [schema, *schema["$defs"].values()]

    def described(field: dict) -> bool:   # a section's may be its model's own (behind $ref)
        ref = field.get("$ref", "").rpartition("/")[2]
        return bool(field.get("description") or schema["$defs"].get(ref, {}).get("description"))

    missing = [f"{model.get('title')}.{name}" for model in models
               for name, field in model.get("properties", {}).items() if not described(field)]
    assert missing == []


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_a_bundled_scenario_names_the_schema_and_validates(path):
    assert path.read_text().splitlines()[0] == HEADER
    data = yaml.load(path.read_text(), Loader=SafeLoader)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator().iter_errors(data)]
    assert errors == []


@pytest.mark.parametrize("bad, field", [
    ({"fabric": {"gpus": 1}}, "fabric.gpus"),
    ({"mrc": {"evz": 128}}, "mrc.evz"),
    ({"spray": {"placement": "sprinkled"}}, "spray.placement"),
    ({"policies": ["ecmp", "hash"]}, "policies[1]"),
    ({"fabirc": {"gpus": 8}}, "fabirc"),
    ({"failures": {"links": "four"}}, "failures.links"),
])
def test_what_the_schema_refuses_the_loader_refuses(bad, field):
    data = {"workload": [{"collective": "permutation", "size": "1MiB"}], **bad}
    assert list(validator().iter_errors(data)), "the schema let it through"
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert err.value.field == field
    good = {"workload": [{"collective": "permutation", "size": "1MiB"}],
            "failures": {"links": 4, "planes": [3]}, "fabric": {"oversubscription": "3:1"}}
    assert list(validator().iter_errors(good)) == []
    parse_scenario(good)
