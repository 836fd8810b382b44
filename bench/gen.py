#!/usr/bin/env python3
"""Inputs for bench/apps.sh, generated the same on every machine (own
generator, no library randomness):

  gen.py sat3 INSTANCES VARS CLAUSES   random 3-SAT instances as SMT-LIB 2, one
                                       (check-sat) each, for z3
  gen.py c FUNCTIONS OUT.c             a C program of FUNCTIONS functions of
                                       loops and switches for gcc -O2; prints
                                       the checksum the compiled program must print"""
import sys


class Minstd:
    """The Park-Miller generator: 31-bit, exact in any language."""

    def __init__(self, seed):
        self.x = seed

    def next(self, n):
        self.x = self.x * 48271 % 2147483647
        return self.x % n


def sat3(instances, nvars, nclauses):
    r = Minstd(7)
    for _ in range(instances):
        print("(push)")
        print("\n".join(f"(declare-const v{i} Bool)" for i in range(nvars)))
        for _ in range(nclauses):
            lits = []
            while len(lits) < 3:
                v = f"v{r.next(nvars)}"
                if v not in lits and f"(not {v})" not in lits:
                    lits.append(v if r.next(2) else f"(not {v})")
            print(f"(assert (or {' '.join(lits)}))")
        print("(check-sat)\n(pop)")


M = 0xFFFFFFFF


def c_program(nfuncs, path):
    """Each function mixes its argument through 8 steps of a switch on two
    bits, with its own constants; main chains them all and prints the result.
    The same arithmetic is done here, in 32-bit unsigned, for the checksum."""
    r = Minstd(11)
    src = ["#include <stdint.h>", "#include <stdio.h>", ""]
    funcs = []
    for f in range(nfuncs):
        k = [r.next(1 << 30) | 1 for _ in range(5)]
        funcs.append(k)
        src += [f"static uint32_t f{f}(uint32_t x)", "{",
                f"  uint32_t a = x * {k[0]}u + {k[1]}u, s = {k[2]}u;",
                "  for (uint32_t i = 0; i < 8; i++) {",
                "    switch ((a >> (i * 3)) & 3) {",
                f"    case 0: s += a ^ (i * {k[3]}u); break;",
                f"    case 1: s ^= (a << 3) + {k[4]}u; break;",
                "    case 2: s -= a >> 2; break;",
                "    default: s = (s << 5 | s >> 27) + a; break;",
                "    }",
                "    a = a * 1103515245u + 12345u;",
                "  }",
                "  return s;",
                "}", ""]
    src += ["int main(void)", "{", "  uint32_t x = 1;"]
    src += [f"  x = f{f}(x) + {f}u;" for f in range(nfuncs)]
    src += ['  printf("%u\\n", x);', "  return 0;", "}"]
    open(path, "w").write("\n".join(src) + "\n")

    x = 1
    for f, k in enumerate(funcs):
        a, s = (x * k[0] + k[1]) & M, k[2]
        for i in range(8):
            sel = (a >> (i * 3)) & 3
            if sel == 0:
                s = (s + (a ^ (i * k[3] & M))) & M
            elif sel == 1:
                s ^= ((a << 3) + k[4]) & M
            elif sel == 2:
                s = (s - (a >> 2)) & M
            else:
                s = (((s << 5) | (s >> 27)) + a) & M
            a = (a * 1103515245 + 12345) & M
        x = (s + f) & M
    print(x)


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "sat3":
        sat3(*map(int, args))
    elif kind == "c":
        c_program(int(args[0]), args[1])
    else:
        sys.exit(__doc__)
