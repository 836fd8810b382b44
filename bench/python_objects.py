"""python_objects.py [N]: a real interpreter under the allocator.  Builds a dict
of N records (100,000 by default) (strings of 1-1000 characters: those above 512 B are malloc's,
the rest pymalloc's; tables and lists that grow by doubling), encodes it to
one JSON string and decodes it back, deletes every other record and sorts the
rest, twice over.  CPU time; an op is a record built, decoded or sorted."""
import json
import random
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    t0 = time.process_time()
    rnd = random.Random(1)
    ops = 0
    for _ in range(2):
        d = {}
        for i in range(n):
            d["k%d" % i] = {"id": i, "name": "x" * rnd.randrange(1, 1000), "tags": [i, i + 1, str(i)]}
        s = json.dumps(d)
        back = json.loads(s)
        for k in list(back)[::2]:
            del back[k]
        rows = sorted(back.items(), key=lambda kv: kv[1]["name"])
        ops += len(d) + len(back) * 2 + len(rows)
        del d, s, back, rows
    secs = time.process_time() - t0
    print("RESULT ops=%d secs=%.6f ops_per_sec=%.0f" % (ops, secs, ops / secs))


main()
