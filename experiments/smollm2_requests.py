"""Write the smollm2 scenarios' prompt file, ``scenarios/smollm2_requests.jsonl``: chat
requests (user messages) in three domains, built from this machine's Python standard library (PSF
licence) and seeded word problems, each record naming its source (:mod:`specrl.pretrained.requests`).

Only held-out requests are written: from standard-library files and seeds the pair's draft was never
distilled on. The scenarios read the file as a user's would (``prompts.file``, ``domain_field:
domain``, ``chat: true``): split 70/15/15 into train, validation and test by a seeded hash of each
request, and decoded through the target's chat template. Shipped, so that every machine has the same
requests whatever its Python version.

    python experiments/smollm2_requests.py            # rewrites the shipped file
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specrl.io import write_text_atomic
from specrl.pretrained.requests import heldout_records

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "smollm2_requests.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-domain", type=int, default=128, help="requests of each domain")
    parser.add_argument("--seed", type=int, default=0, help="the seed the draft's requests were built with")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    records = heldout_records(args.seed, args.per_domain)
    write_text_atomic(args.out, "".join(json.dumps(record) + "\n" for record in records))
    print(f"{len(records)} requests -> {args.out}")


if __name__ == "__main__":
    main()
