#!/usr/bin/env python3
"""Validate probe --json documents against docs/device.schema.json with the
`jsonschema` package (Draft 2020-12), checking the schema itself first.

Usage: probe/validate_json.py SCHEMA FILE...   (exit 1 naming each error)
"""
import json
import sys

from jsonschema import Draft202012Validator


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    schema = json.load(open(sys.argv[1]))
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    bad = 0
    for path in sys.argv[2:]:
        for err in validator.iter_errors(json.load(open(path))):
            where = "/".join(str(p) for p in err.absolute_path)
            print("%s: /%s: %s" % (path, where, err.message), file=sys.stderr)
            bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
