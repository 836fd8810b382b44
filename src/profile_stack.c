/* profile_stack.c — a sample's stack (HAKMEM_PROFILE, profile.c): the
 * return addresses of the frames above the caller, innermost first.
 *
 * The frames are walked by their call-frame information (.eh_frame, what
 * libgcc's unwinder reads), which needs no frame pointers: at each return
 * address, the rule of the function's frame there says where its canonical
 * frame address (CFA) is, the stack pointer or %rbp plus an offset; the
 * return address into its caller is at CFA - 8 and the caller's stack
 * pointer is the CFA (x86-64's call), and the caller's %rbp is at the
 * offset the rule gives, or where it was.  libgcc interprets the FDE's
 * program for every frame of every walk (about 1,900 instructions a frame);
 * here each return address's rule is interpreted once and kept in a table,
 * so that a walk costs a few dozen instructions a frame.
 *
 * Only the common rules are read: CFA from %rsp or %rbp, the return address
 * and %rbp saved at an offset from it, remember and restore of the state.
 * A frame whose rule is anything else (DWARF expressions, as in the signal
 * trampoline, or a rule the interpreter does not know), or whose CFA is not
 * above the stack pointer and within the thread's stack, sends the whole
 * walk to glibc's backtrace(); a return address outside any unwind table,
 * or a return address the rule says is undefined (the outermost frame),
 * ends the stack, as it ends libgcc's.  No lock and no allocation: the
 * table is written with a compare-and-swap on its key, the rule after it.
 * Its rules are kept for the life of the process: a library unloaded and
 * another loaded at the same addresses would be walked by the first one's
 * rules (the reads stay within the thread's stack). */
#include "internal.h"
#include "profile_tables.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <string.h>

#if defined(__x86_64__) && defined(DLFO_EH_SEGMENT_TYPE)

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };
enum { SAME, AT, UNDEFINED };

/* A frame's rule while its program runs. */
typedef struct cfi_s {
  uint64_t cfa_reg;
  int64_t cfa_off, rbp_off, ra_off;
  int rbp, ra;                    /* SAME, AT (CFA + *_off) or UNDEFINED */
} cfi_t;

/* A rule as the walk uses it, packed in a word: CFA offset (32 bits), %rbp's
 * offset (16), flags. */
#define RULE_OK      (1ull << 48)   /* (0: the entry is not written yet) */
#define RULE_RBP_CFA (1ull << 49)   /* CFA = %rbp + offset, else %rsp + offset */
#define RULE_RBP_AT  (1ull << 50)   /* the caller's %rbp is saved at CFA + its offset */
#define RULE_END     (1ull << 51)   /* the outermost frame, or no unwind table */
#define RULE_OTHER   (1ull << 52)   /* a rule this walk does not follow */
#define RULES        (1u << 14)
static _Atomic uintptr_t rule_pc[RULES];
static _Atomic uint64_t rule_word[RULES];

/* A LEB128 number at *p, unsigned or signed. */
static uint64_t leb128(const uint8_t **p, bool is_signed) {
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    b = *(*p)++;
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
  } while (b & 0x80);
  if (is_signed && shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
  return v;
}
static uint64_t uleb(const uint8_t **p) { return leb128(p, false); }
static int64_t sleb(const uint8_t **p) { return (int64_t)leb128(p, true); }

/* A pointer in encoding enc (DW_EH_PE_*) at *p: its value, relative to
 * where it is (pcrel) or to base (datarel).  False for what .eh_frame on
 * x86-64 does not use (indirect, other bases). */
static bool read_ptr(const uint8_t **p, uint8_t enc, uintptr_t base, uintptr_t *out) {
  const uint8_t *at = *p;
  uint64_t v = 0;
  switch (enc & 0x0f) {
  case 0x00: case 0x04: case 0x0c: memcpy(&v, at, 8); *p += 8; break;
  case 0x01: v = uleb(p); break;
  case 0x09: v = (uint64_t)sleb(p); break;
  case 0x02: { uint16_t x; memcpy(&x, at, 2); v = x; *p += 2; break; }
  case 0x0a: { int16_t x; memcpy(&x, at, 2); v = (uint64_t)(int64_t)x; *p += 2; break; }
  case 0x03: { uint32_t x; memcpy(&x, at, 4); v = x; *p += 4; break; }
  case 0x0b: { int32_t x; memcpy(&x, at, 4); v = (uint64_t)(int64_t)x; *p += 4; break; }
  default: return false;
  }
  if (enc & 0x80) return false;
  if ((enc & 0x70) == 0x10) v += (uintptr_t)at;
  else if ((enc & 0x70) == 0x30) v += base;
  else if (enc & 0x70) return false;
  *out = (uintptr_t)v;
  return true;
}

static void set_reg(cfi_t *s, uint64_t reg, int kind, int64_t off) {
  if (reg == REG_RBP) { s->rbp = kind; s->rbp_off = off; }
  if (reg == REG_RA) { s->ra = kind; s->ra_off = off; }
}

/* Run a CFA program from *loc until the row that holds target.  False: an
 * instruction this walk does not follow. */
static bool run(const uint8_t *p, const uint8_t *end, uintptr_t *loc, uintptr_t target, cfi_t *s, const cfi_t *init,
                uint64_t code_align, int64_t data_align) {
  cfi_t saved[8];
  int depth = 0;
  while (p < end) {
    uint8_t op = *p++;
    uint64_t reg, delta = 0;
    switch (op >> 6) {
    case 1: delta = op & 0x3f; goto advance;
    case 2: set_reg(s, op & 0x3f, AT, (int64_t)uleb(&p) * data_align); continue;
    case 3: reg = op & 0x3f; goto restore;
    }
    switch (op) {
    case 0x00: continue;                                        /* nop */
    case 0x02: delta = *p++; goto advance;
    case 0x03: { uint16_t d; memcpy(&d, p, 2); p += 2; delta = d; goto advance; }
    case 0x04: { uint32_t d; memcpy(&d, p, 4); p += 4; delta = d; goto advance; }
    case 0x05: reg = uleb(&p); set_reg(s, reg, AT, (int64_t)uleb(&p) * data_align); continue;
    case 0x11: reg = uleb(&p); set_reg(s, reg, AT, sleb(&p) * data_align); continue;
    case 0x06: reg = uleb(&p); goto restore;
    case 0x07: set_reg(s, uleb(&p), UNDEFINED, 0); continue;
    case 0x08: set_reg(s, uleb(&p), SAME, 0); continue;
    case 0x0a: if (depth == 8) return false; saved[depth++] = *s; continue;   /* remember_state */
    case 0x0b: if (!depth) return false; *s = saved[--depth]; continue;         /* restore_state */
    case 0x0c: s->cfa_reg = uleb(&p); s->cfa_off = (int64_t)uleb(&p); continue;
    case 0x12: s->cfa_reg = uleb(&p); s->cfa_off = sleb(&p) * data_align; continue;
    case 0x0d: s->cfa_reg = uleb(&p); continue;
    case 0x0e: s->cfa_off = (int64_t)uleb(&p); continue;
    case 0x13: s->cfa_off = sleb(&p) * data_align; continue;
    case 0x2e: uleb(&p); continue;                              /* GNU_args_size */
    case 0x10: case 0x16:                                       /* another register's expression */
      reg = uleb(&p);
      p += uleb(&p);
      if (reg == REG_RBP || reg == REG_RA) return false;
      continue;
    default: return false;
    }
  advance:
    *loc += delta * code_align;
    if (*loc > target) return true;
    continue;
  restore:
    if (reg == REG_RBP) { s->rbp = init->rbp; s->rbp_off = init->rbp_off; }
    if (reg == REG_RA) { s->ra = init->ra; s->ra_off = init->ra_off; }
  }
  return true;
}

/* The rule of the frame that return address pc - 1 is in, read from the
 * unwind tables (the FDE found through .eh_frame_hdr's sorted table). */
static uint64_t rule_read(uintptr_t pc) {
  struct dl_find_object obj;
  if (_dl_find_object((void *)pc, &obj) != 0 || !obj.dlfo_eh_frame) return RULE_OK | RULE_END;
  const uint8_t *hdr = obj.dlfo_eh_frame, *p = hdr + 4;
  uintptr_t eh_frame, count, cie_enc_base = (uintptr_t)hdr;
  if (hdr[0] != 1 || hdr[3] != 0x3b || !read_ptr(&p, hdr[1], cie_enc_base, &eh_frame) ||
      !read_ptr(&p, hdr[2], cie_enc_base, &count) || count == 0)
    return RULE_OK | RULE_OTHER;
  const int32_t *table = (const int32_t *)p;             /* (start, FDE) pairs, datarel sdata4, sorted */
  uintptr_t lo = 0, hi = count;
  while (lo < hi) {
    uintptr_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)hdr + (intptr_t)table[2 * mid] <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return RULE_OK | RULE_END;
  const uint8_t *fde = hdr + table[2 * (lo - 1) + 1];
  uint32_t len, cie_len;
  int32_t cie_off;
  memcpy(&len, fde, 4);
  memcpy(&cie_off, fde + 4, 4);
  const uint8_t *cie = fde + 4 - cie_off;
  memcpy(&cie_len, cie, 4);
  if (len == 0xffffffff || cie_len == 0xffffffff) return RULE_OK | RULE_OTHER;

  /* the CIE: version, augmentation, alignments, the return address register */
  const uint8_t *c = cie + 8;
  uint8_t version = *c++;
  if (version != 1 && version != 3) return RULE_OK | RULE_OTHER;
  const char *aug = (const char *)c;
  c += strlen(aug) + 1;
  uint64_t code_align = uleb(&c);
  int64_t data_align = sleb(&c);
  uint64_t ra_reg = version == 1 ? *c++ : uleb(&c);
  uint8_t fde_enc = 0;
  if (aug[0] == 'z') {
    uint64_t n = uleb(&c);
    const uint8_t *aug_end = c + n;
    for (const char *a = aug + 1; *a; a++) {
      uintptr_t ignored;
      if (*a == 'R') fde_enc = *c++;
      else if (*a == 'L') c++;
      else if (*a == 'P') { uint8_t e = *c++; if (!read_ptr(&c, e & 0x7f, 0, &ignored)) return RULE_OK | RULE_OTHER; }
      else return RULE_OK | RULE_OTHER;                  /* 'S' (a signal frame), or unknown */
    }
    c = aug_end;
  } else if (aug[0]) {
    return RULE_OK | RULE_OTHER;
  }
  if (ra_reg != REG_RA) return RULE_OK | RULE_OTHER;

  /* the FDE: the code it covers, then the programs up to pc */
  const uint8_t *f = fde + 8;
  uintptr_t start, range;
  if (!read_ptr(&f, fde_enc, 0, &start) || !read_ptr(&f, fde_enc & 0x0f, 0, &range)) return RULE_OK | RULE_OTHER;
  if (pc < start || pc >= start + range) return RULE_OK | RULE_END;
  if (aug[0] == 'z') f += uleb(&f);
  cfi_t s = { .cfa_reg = REG_RSP, .rbp = SAME, .ra = UNDEFINED }, init;
  uintptr_t loc = start;
  if (!run(c, cie + 4 + cie_len, &loc, UINTPTR_MAX, &s, &s, code_align, data_align)) return RULE_OK | RULE_OTHER;
  init = s;
  loc = start;
  if (!run(f, fde + 4 + len, &loc, pc, &s, &init, code_align, data_align)) return RULE_OK | RULE_OTHER;

  if (s.ra == UNDEFINED) return RULE_OK | RULE_END;
  if (s.ra != AT || s.ra_off != -8 || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) || s.cfa_off < 8 ||
      s.cfa_off > INT32_MAX || (s.rbp == AT && (s.rbp_off < INT16_MIN || s.rbp_off > INT16_MAX)) || s.rbp == UNDEFINED)
    return RULE_OK | RULE_OTHER;
  uint64_t w = RULE_OK | (uint32_t)s.cfa_off;
  if (s.cfa_reg == REG_RBP) w |= RULE_RBP_CFA;
  if (s.rbp == AT) w |= RULE_RBP_AT | (uint64_t)(uint16_t)s.rbp_off << 32;
  return w;
}

/* The rule at return address pc (looked up at pc - 1, within the call):
 * from the table, or read and put there. */
static uint64_t rule_at(uintptr_t pc) {
  uint32_t i = (uint32_t)(hash_ptr(pc) >> 32) & (RULES - 1);
  for (int probe = 0; probe < 8; probe++, i = (i + 1) & (RULES - 1)) {
    uintptr_t k = atomic_load_explicit(&rule_pc[i], memory_order_acquire);
    if (k == pc) {
      uint64_t w = atomic_load_explicit(&rule_word[i], memory_order_acquire);
      if (w) return w;
      break;
    }
    if (k == 0) {
      uint64_t w = rule_read(pc - 1);
      uintptr_t expected = 0;
      if (atomic_compare_exchange_strong_explicit(&rule_pc[i], &expected, pc, memory_order_relaxed, memory_order_relaxed))
        atomic_store_explicit(&rule_word[i], w, memory_order_release);
      return w;
    }
  }
  return rule_read(pc - 1);
}

static __thread uintptr_t stack_lo, stack_hi;   /* this thread's stack, once known */

static bool stack_known(void) {
  if (stack_hi) return stack_hi != 1;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  stack_hi = 1;                             /* (unknown: backtrace() for this thread) */
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
    stack_lo = (uintptr_t)addr;
    stack_hi = (uintptr_t)addr + size;
  }
  pthread_attr_destroy(&attr);
  return stack_hi != 1;
}

/* The frames by the rules; 0 if a frame needs backtrace(). */
static HM_NOINLINE int walk(void **pc, int max) {
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);   /* (a frame pointer here) */
  uintptr_t sp = fp + 16, rbp = *(uintptr_t *)fp, ra = (uintptr_t)__builtin_return_address(0);
  int n = 0;
  pc[n++] = (void *)ra;                     /* in profile_stack */
  while (n < max) {
    uint64_t w = rule_at(ra);
    if (w & RULE_END) break;
    if (w & RULE_OTHER) return 0;
    uintptr_t cfa = ((w & RULE_RBP_CFA) ? rbp : sp) + (uint32_t)w;
    if (cfa <= sp || cfa > stack_hi || (cfa & 7)) return 0;
    if (w & RULE_RBP_AT) {
      uintptr_t at = cfa + (int16_t)(uint16_t)(w >> 32);
      if (at < sp || at + 8 > stack_hi) return 0;
      rbp = *(uintptr_t *)at;
    }
    ra = *(uintptr_t *)(cfa - 8);
    sp = cfa;
    if (!ra) break;
    pc[n++] = (void *)ra;
  }
  return n;
}

int profile_stack(void **pc, int max) {
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  atomic_fetch_add_explicit(&hm_prof.walks, 1, memory_order_relaxed);
  if (stack_known() && here > stack_lo && here < stack_hi) {
    int n = walk(pc, max);
    if (n > 1) {                            /* (the walk's own frame off) */
      memmove(pc, pc + 1, (size_t)(n - 1) * sizeof *pc);
      return n - 1;
    }
  }
  atomic_fetch_add_explicit(&hm_prof.walks_slow, 1, memory_order_relaxed);
  int n = backtrace(pc, max);               /* (its first frame, this one's, off) */
  if (n > 0) memmove(pc, pc + 1, (size_t)(n - 1) * sizeof *pc);
  return n > 0 ? n - 1 : 0;
}

#else

int profile_stack(void **pc, int max) {
  int n = backtrace(pc, max);
  if (n > 0) memmove(pc, pc + 1, (size_t)(n - 1) * sizeof *pc);
  return n > 0 ? n - 1 : 0;
}

#endif
