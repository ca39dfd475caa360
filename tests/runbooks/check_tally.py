"""The lifecycle runbook's own check of the tally job's committed output, computed independently.

    python tests/runbooks/check_tally.py DIR --keys K --per-key N [--prefix]

Every committed record ``[key, seq, count, total, last, gaps, ms]`` must hold what the input
implies for seq, whatever version wrote it: count == seq, total == seq*(seq+1)/2 and last == seq
where the version has them, gaps == 0; and each key's seqs must be 1..N, each once (with
``--prefix``: 1..m for some m, each once: the output of a job cancelled half way). Exits 1 naming
the first few wrong records, else prints one line of counts.
"""

import argparse
import sys
from collections import defaultdict

from flinkpy.connectors.verification import read_committed


def problems(records, keys: int, per_key: int, prefix: bool) -> list[str]:
    seqs: dict[int, list[int]] = defaultdict(list)
    wrong = []
    for rec in records:
        key, seq, count, total, last, gaps = rec[:6]
        seqs[key].append(seq)
        expected = (seq, seq * (seq + 1) // 2, seq, 0)
        if any(got is not None and got != want for got, want in zip((count, total, last, gaps), expected)) or count is None:
            wrong.append(f"record {rec[:6]} should hold count {expected[0]}, total {expected[1]}, last {expected[2]}, gaps 0")
    for key in range(keys):
        got = sorted(seqs.get(key, []))
        end = (got[-1] if got else 0) if prefix else per_key
        if got != list(range(1, end + 1)):
            dups = len(got) - len(set(got))
            wrong.append(f"key {key}: {len(set(range(1, end + 1)) - set(got))} seq(s) of 1..{end} missing, {dups} duplicated")
    return wrong


def main(argv) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--per-key", type=int, required=True)
    parser.add_argument("--prefix", action="store_true")
    args = parser.parse_args(argv)
    records = list(read_committed(args.dir))
    wrong = problems(records, args.keys, args.per_key, args.prefix)
    if wrong:
        print(f"check_tally: {args.dir}: {len(wrong)} problem(s): " + "; ".join(wrong[:5]), file=sys.stderr)
        return 1
    print(f"{args.dir}: {len(records)} records, every one exact")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
