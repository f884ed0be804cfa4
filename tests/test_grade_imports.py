"""The grader's processes start without the second that jsonschema's IRI grammar costs
(labkit/grade/__init__.py): safe only while no notebook schema asks for a string format."""
import json
import subprocess
import sys
from pathlib import Path

import nbformat


def string_formats(node):
    """Every ``"format": "<name>"`` keyword in a JSON schema (a property *named* format,
    as raw cells' metadata has, holds a schema, not a string)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "format" and isinstance(value, str):
                yield value
            yield from string_formats(value)
    elif isinstance(node, list):
        for value in node:
            yield from string_formats(value)


def test_string_formats_are_found_where_they_are():
    assert list(string_formats({"properties": {"format": {"type": "string"},
                                               "url": {"format": "iri"}}})) == ["iri"]


def test_nbformat_schemas_use_no_string_format():
    schemas = list((Path(nbformat.__file__).parent).rglob("*.json"))
    assert len(schemas) >= 4
    for path in schemas:
        assert list(string_formats(json.loads(path.read_text()))) == [], path


def test_the_grader_imports_nbformat_without_the_iri_grammar_and_still_validates():
    code = ("import labkit.grade.runner, sys, nbformat; "
            "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]); "
            "nbformat.validate(nb); "
            "bad = nbformat.from_dict({'nbformat': 4, 'nbformat_minor': 5, 'metadata': {}, "
            "'cells': [{'cell_type': 'code'}]}); "
            "ok = nbformat.validator.isvalid(bad); "
            "print('rfc3987_syntax' in sys.modules and sys.modules['rfc3987_syntax'] is not None, ok)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]
