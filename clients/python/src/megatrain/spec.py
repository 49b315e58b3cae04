"""Job specs as the CLI reads them: a dict with the spec file's snake_case keys, a YAML or JSON
file, or a JobSpec. What the CLI refuses is refused here too (ValueError naming the key), and a
value means what it means to the CLI:

- YAML scalars follow the CLI's rule, not YAML 1.1's: only true/True/false/False are booleans,
  null/~/nothing is null, a JSON number is a number, anything else is a string (PyYAML's default
  would read `speculative_updates: off` as false and `name: 2026-12-07` as a date);
- keys are the proto's field names (a camelCase JSON name is an unknown key);
- an integer field takes an integer (`steps: 10.0` is refused, as the CLI refuses it).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Union

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format

from megatrain.v1 import trainer_pb2 as pb

SpecLike = Union[Mapping[str, Any], str, "os.PathLike[str]", pb.JobSpec]

_INTEGER_TYPES = {
    _descriptor.FieldDescriptor.TYPE_INT32, _descriptor.FieldDescriptor.TYPE_INT64,
    _descriptor.FieldDescriptor.TYPE_UINT32, _descriptor.FieldDescriptor.TYPE_UINT64,
    _descriptor.FieldDescriptor.TYPE_SINT32, _descriptor.FieldDescriptor.TYPE_SINT64,
    _descriptor.FieldDescriptor.TYPE_FIXED32, _descriptor.FieldDescriptor.TYPE_FIXED64,
    _descriptor.FieldDescriptor.TYPE_SFIXED32, _descriptor.FieldDescriptor.TYPE_SFIXED64,
}


def _yaml_loader():
    import yaml

    class SpecLoader(yaml.SafeLoader):
        """Plain scalars resolved as client/spec_file.cc resolves them."""

    SpecLoader.yaml_implicit_resolvers = {}
    number = r"-?(?:0|[1-9][0-9]*)"
    SpecLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|false|False)$"),
                                     list("tTfF"))
    SpecLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:null|~|)$"), ["n", "~", ""])
    SpecLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(rf"^{number}$"), list("-0123456789"))
    SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                     re.compile(rf"^{number}(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$"),
                                     list("-0123456789"))
    return SpecLoader


def read_spec_file(path: Union[str, "os.PathLike[str]"]) -> Any:
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return yaml.load(text, Loader=_yaml_loader())
    return json.loads(text)


def _check(value: Any, field: _descriptor.FieldDescriptor, where: str) -> None:
    if field.type == _descriptor.FieldDescriptor.TYPE_MESSAGE:
        _check_message(value, field.message_type, where + ".")
    elif field.type in _INTEGER_TYPES and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{where} must be an integer, not {value!r}")


def _check_message(spec: Any, desc: _descriptor.Descriptor, where: str = "") -> None:
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where.rstrip('.') or 'a job spec'} is a mapping of the spec file's keys, not {spec!r}")
    for key, value in spec.items():
        field = desc.fields_by_name.get(key) if isinstance(key, str) else None
        if field is None:
            raise ValueError(f"unknown key '{where}{key}'")
        if value is None:
            continue
        if field.is_repeated:
            if not isinstance(value, list):
                raise ValueError(f"{where}{key} is a list, not {value!r}")
            for i, item in enumerate(value):
                _check(item, field, f"{where}{key}[{i}]")
        else:
            _check(value, field, where + key)


def load_spec(spec: SpecLike) -> pb.JobSpec:
    """A JobSpec from a dict with the spec file's snake_case keys, a YAML/JSON file, or a JobSpec.
    An unknown key, and a value of the wrong kind, is refused by name (ValueError), as the CLI
    does."""
    if isinstance(spec, pb.JobSpec):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        spec = read_spec_file(spec)
    _check_message(spec, pb.JobSpec.DESCRIPTOR)
    try:
        return json_format.ParseDict(dict(spec), pb.JobSpec())
    except json_format.ParseError as e:
        raise ValueError(f"job spec: {e}") from None
