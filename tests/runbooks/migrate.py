"""The lifecycle runbook's state migration: add a field to every tally of a savepoint.

    python tests/runbooks/migrate.py SRC DST FIELD [--uid tally]

Writes a new savepoint DST from SRC with ``flinkpy.state_processor``: each tally of the keyed
state ``tally`` gets FIELD, computed from what the tally holds. The job's input is each key's
sequence 1, 2, 3, ..., so a tally that counted n records has seen 1..n: its ``total`` is
n(n+1)/2 and its ``last`` is n. Prints the RewriteResult as one JSON document.
"""

import argparse
import json
import sys

from flinkpy.state_processor import SavepointWriter

DERIVED = {
    "total": lambda tally: tally["count"] * (tally["count"] + 1) // 2,
    "last": lambda tally: tally["count"],
}


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("field", choices=sorted(DERIVED))
    parser.add_argument("--uid", default="tally")
    args = parser.parse_args(argv)
    derive = DERIVED[args.field]
    result = (SavepointWriter.from_existing_savepoint(args.src)
              .transform_keyed_state(args.uid, "tally", lambda key, tally: {**tally, args.field: derive(tally)})
              .write(args.dst))
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main(sys.argv[1:])
