/* profile_dump.c — the heap profiler's reports (HAKMEM_PROFILE, profile.c
 * samples): live heap now, live heap at its peak, everything allocated,
 * and, at exit, what is still live (leaks).  Each as folded stacks
 * (PATH.KIND.folded: "root;...;leaf bytes" lines, what flamegraph.pl,
 * inferno and speedscope read) and as a flame graph (PATH.KIND.svg); at exit
 * the top call sites on stderr.  Frames are named by the dynamic symbol
 * tables at dump time (as dladdr would, below); one without a name is
 * "OBJECT+0xADDRESS", for addr2line (tools/hakmem run --profile does that).
 * Dumps are written at exit to PREFIX.PID.{leaks,peak,alloc}, by
 * hakmem_profile_dump(PATH) to PATH.{live,peak,alloc}, and on
 * HAKMEM_PROFILE_SIGNAL to PREFIX.PID.N.{live,peak,alloc}: the handler only
 * raises a flag, and the thread's next sampled or slow-path allocation
 * writes the dump (a handler may not take the loader's lock that listing
 * the loaded objects takes).
 *
 * Written without malloc: the working memory is one mapping (an arena), the
 * output goes through a buffer to write(2).  The counts are copied under the
 * lock; frames of existing stacks never change, so they are read after. */
#include "internal.h"
#include "profile.h"
#include "profile_tables.h"
#include "hakmem.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct arena_s { uint8_t *base; size_t used, size; } arena_t;

static void *take(arena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (a->used + n > a->size) return NULL;
  void *p = a->base + a->used;
  a->used += n;
  return p;
}

typedef struct out_s { int fd; size_t n; bool bad; char buf[8192]; } out_t;

static void flush(out_t *o) {
  for (size_t done = 0; done < o->n;) {
    ssize_t w = write(o->fd, o->buf + done, o->n - done);
    if (w <= 0) { o->bad = true; break; }
    done += (size_t)w;
  }
  o->n = 0;
}

static void put(out_t *o, const char *s, size_t n) {
  while (n) {
    if (o->n == sizeof o->buf) flush(o);
    size_t k = sizeof o->buf - o->n < n ? sizeof o->buf - o->n : n;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    n -= k;
  }
}

static void puts_(out_t *o, const char *s) { put(o, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void putf(out_t *o, const char *fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n > 0) put(o, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* Text in XML: the five characters that need it escaped. */
static void put_xml(out_t *o, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': puts_(o, "&amp;"); break;
    case '<': puts_(o, "&lt;"); break;
    case '>': puts_(o, "&gt;"); break;
    case '"': puts_(o, "&quot;"); break;
    case '\'': puts_(o, "&apos;"); break;
    default: put(o, s, 1);
    }
  }
}

enum { VIEW_LIVE, VIEW_PEAK, VIEW_ALLOC, VIEWS };

/* What a dump works on: per stack its frames as function numbers (root
 * first) and its three values; per function its name. */
typedef struct dump_s {
  arena_t a;
  uint32_t ntraces, nfuncs;
  uint32_t *depth, **funcs;       /* [ntraces] */
  uint64_t *value[VIEWS], *count[VIEWS];
  const char **name;              /* [nfuncs] */
  uint64_t dropped;
  char exe[256];
  struct object_s *objects;       /* [OBJECTS], the loaded objects */
  uint32_t nobjects;
} dump_t;

/* ---- naming frames ----------------------------------------------------------
 * A frame is named by the dynamic symbol of its object that holds it, as
 * dladdr would name it; but dladdr scans the object's whole symbol table for
 * each address (at exit from gcc's cc1, a tenth of the process's run), so
 * each object's defined symbols are sorted by address once per dump, when a
 * frame first falls in it, and searched. */

typedef struct object_s {
  uintptr_t lo, hi, bias;         /* its loaded extent, and its load bias */
  const char *name;               /* "" for the program */
  const ElfW(Dyn) *dyn;
  const ElfW(Sym) *symtab;
  const char *strtab;
  uint32_t *by_addr, nsyms;       /* its defined symbols' indices, by address */
  bool read;
} object_t;

#define OBJECTS 1024

static int add_object(struct dl_phdr_info *info, size_t size, void *arg) {
  dump_t *d = arg;
  if (d->nobjects == OBJECTS) return 1;
  object_t *o = &d->objects[d->nobjects];
  *o = (object_t){ .lo = UINTPTR_MAX, .bias = info->dlpi_addr, .name = info->dlpi_name ? info->dlpi_name : "" };
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t at = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_DYNAMIC) o->dyn = (const ElfW(Dyn) *)at;
    if (ph->p_type != PT_LOAD) continue;
    if (at < o->lo) o->lo = at;
    if (at + ph->p_memsz > o->hi) o->hi = at + ph->p_memsz;
  }
  if (o->lo < o->hi) d->nobjects++;
  return 0;
}

/* The dynamic symbol table's size, from its hash table (DT_GNU_HASH: the
 * last chain of the highest bucket ends it). */
static uint32_t symbol_count(const uint32_t *hash, const uint32_t *gnu_hash) {
  if (hash) return hash[1];
  if (!gnu_hash) return 0;
  uint32_t nbuckets = gnu_hash[0], first = gnu_hash[1], bloom = gnu_hash[2];
  const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu_hash + 4) + bloom), *chain = buckets + nbuckets;
  uint32_t last = 0;
  for (uint32_t b = 0; b < nbuckets; b++)
    if (buckets[b] > last) last = buckets[b];
  if (last < first) return first;
  while (!(chain[last - first] & 1)) last++;
  return last + 1;
}

/* Does symbol i sort before symbol j: by address, then by place in the
 * table (dladdr's choice among aliases: the first). */
static bool sym_before(const object_t *o, uint32_t i, uint32_t j) {
  ElfW(Addr) a = o->symtab[i].st_value, b = o->symtab[j].st_value;
  return a < b || (a == b && i < j);
}

static void sift(const object_t *o, uint32_t *v, uint32_t at, uint32_t n) {
  for (uint32_t child; (child = 2 * at + 1) < n; at = child) {
    if (child + 1 < n && sym_before(o, v[child], v[child + 1])) child++;
    if (!sym_before(o, v[at], v[child])) return;
    uint32_t t = v[at]; v[at] = v[child]; v[child] = t;
  }
}

/* o's defined symbols with a size, sorted by address (a heap sort: no
 * allocation).  Addresses in the dynamic section are as the loader left
 * them: relocated, or (the vDSO's) relative to the bias. */
static void read_symbols(dump_t *d, object_t *o) {
  o->read = true;
  const uint32_t *hash = NULL, *gnu_hash = NULL;
  for (const ElfW(Dyn) *e = o->dyn; e && e->d_tag != DT_NULL; e++) {
    uintptr_t v = e->d_un.d_ptr < o->bias ? e->d_un.d_ptr + o->bias : e->d_un.d_ptr;
    if (e->d_tag == DT_SYMTAB) o->symtab = (const ElfW(Sym) *)v;
    else if (e->d_tag == DT_STRTAB) o->strtab = (const char *)v;
    else if (e->d_tag == DT_HASH) hash = (const uint32_t *)v;
    else if (e->d_tag == DT_GNU_HASH) gnu_hash = (const uint32_t *)v;
  }
  uint32_t n = o->symtab && o->strtab ? symbol_count(hash, gnu_hash) : 0;
  if (!n || !(o->by_addr = take(&d->a, n * sizeof *o->by_addr))) return;
  for (uint32_t i = 0; i < n; i++) {
    const ElfW(Sym) *sym = &o->symtab[i];
    if (sym->st_shndx != SHN_UNDEF && sym->st_shndx != SHN_ABS && sym->st_size && ELF64_ST_TYPE(sym->st_info) != STT_TLS)
      o->by_addr[o->nsyms++] = i;
  }
  for (uint32_t i = o->nsyms / 2; i-- > 0;) sift(o, o->by_addr, i, o->nsyms);
  for (uint32_t end = o->nsyms; end-- > 1;) {
    uint32_t t = o->by_addr[0]; o->by_addr[0] = o->by_addr[end]; o->by_addr[end] = t;
    sift(o, o->by_addr, 0, end);
  }
}

/* The symbol of o holding address a (the nearest below it, if a is within
 * its size: a static function after an exported one is not the exported
 * one), or NULL. */
static const ElfW(Sym) *symbol_at(dump_t *d, object_t *o, uintptr_t a) {
  if (!o->read) read_symbols(d, o);
  uint32_t lo = 0, hi = o->nsyms;         /* the first symbol above a: hi */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (o->bias + o->symtab[o->by_addr[mid]].st_value <= a) lo = mid + 1;
    else hi = mid;
  }
  if (!hi) return NULL;
  uint32_t k = hi - 1;
  ElfW(Addr) at = o->symtab[o->by_addr[k]].st_value;
  while (k > 0 && o->symtab[o->by_addr[k - 1]].st_value == at) k--;
  const ElfW(Sym) *sym = &o->symtab[o->by_addr[k]];
  return a < o->bias + sym->st_value + sym->st_size ? sym : NULL;
}

/* The name of the function a return address pc is in: its dynamic symbol,
 * else OBJECT+0xADDRESS (the address as addr2line takes it). */
static void frame_name(dump_t *d, uintptr_t pc, char *buf, size_t size) {
  uintptr_t a = pc - 1;                     /* within the call, not after it */
  object_t *o = NULL;
  for (uint32_t i = 0; i < d->nobjects && !o; i++)
    if (a >= d->objects[i].lo && a < d->objects[i].hi) o = &d->objects[i];
  const ElfW(Sym) *sym = o ? symbol_at(d, o, a) : NULL;
  if (!o) snprintf(buf, size, "0x%lx", (unsigned long)a);
  else if (sym) snprintf(buf, size, "%s", o->strtab + sym->st_name);
  else snprintf(buf, size, "%s+0x%lx", o->name[0] ? o->name : d->exe, (unsigned long)(a - o->bias));   /* (the program: its path) */
  for (char *c = buf; *c; c++)
    if (*c == ';' || *c == '\n') *c = ':';
}

/* The number of the function named s, made if new (names: a hash table of
 * size entries). */
static bool intern(dump_t *d, uint32_t *by_name, uint32_t size, const char *s, uint32_t *f) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *c = s; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
  uint32_t j = (uint32_t)h & (size - 1);
  while (by_name[j] && strcmp(d->name[by_name[j] - 1], s)) j = (j + 1) & (size - 1);
  if (!by_name[j]) {
    char *copy = take(&d->a, strlen(s) + 1);
    if (!copy) return false;
    strcpy(copy, s);
    d->name[d->nfuncs++] = copy;
    by_name[j] = d->nfuncs;
  }
  *f = by_name[j] - 1;
  return true;
}

/* Function numbers for every frame: by address, then by name (two return
 * addresses in one function are one function). */
static bool symbolize(dump_t *d) {
  uint32_t frames = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) frames += d->depth[t];
  uint32_t size = 64;
  while (size < 2 * frames) size <<= 1;
  uintptr_t *pcs = take(&d->a, size * sizeof *pcs);
  uint32_t *pc_func = take(&d->a, size * sizeof *pc_func);
  uint32_t *by_name = take(&d->a, size * sizeof *by_name);
  d->name = take(&d->a, (frames + 1) * sizeof *d->name);
  d->objects = take(&d->a, OBJECTS * sizeof *d->objects);
  if (!pcs || !pc_func || !by_name || !d->name || !d->objects) return false;
  d->nobjects = 0;
  dl_iterate_phdr(add_object, d);
  memset(pcs, 0, size * sizeof *pcs);
  memset(by_name, 0, size * sizeof *by_name);
  d->nfuncs = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    const uintptr_t *pc = &hm_prof.pool[hm_prof.traces[t].first];
    uint32_t n = d->depth[t];
    if (!(d->funcs[t] = take(&d->a, (n + 1) * sizeof(uint32_t)))) return false;
    for (uint32_t k = 0; k < n; k++) {
      uintptr_t x = pc[n - 1 - k];          /* root first */
      if (x == 0) {
        if (!intern(d, by_name, size, "[deeper frames]", &d->funcs[t][k])) return false;
        continue;
      }
      uint32_t i = (uint32_t)hash_ptr(x) & (size - 1);
      while (pcs[i] && pcs[i] != x) i = (i + 1) & (size - 1);
      if (!pcs[i]) {
        char buf[512];
        frame_name(d, x, buf, sizeof buf);
        if (!intern(d, by_name, size, buf, &pc_func[i])) return false;
        pcs[i] = x;
      }
      d->funcs[t][k] = pc_func[i];
    }
  }
  return true;
}

/* The stacks of one view as a tree: node 0 is the root, a node's value is
 * its stacks' bytes (its own and its callees'). */
typedef struct node_s { uint32_t func, child, sibling; uint64_t value; } node_t;

static node_t *tree(dump_t *d, int view) {
  uint32_t frames = 1;
  for (uint32_t t = 0; t < d->ntraces; t++) frames += d->depth[t];
  node_t *nodes = take(&d->a, frames * sizeof *nodes);
  if (!nodes) return NULL;
  memset(&nodes[0], 0, sizeof nodes[0]);
  uint32_t n = 1;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    uint64_t v = d->value[view][t];
    if (!v) continue;
    uint32_t at = 0;
    nodes[0].value += v;
    for (uint32_t k = 0; k < d->depth[t]; k++) {
      uint32_t f = d->funcs[t][k], c = nodes[at].child;
      while (c && nodes[c].func != f) c = nodes[c].sibling;
      if (!c) {
        c = n++;
        nodes[c] = (node_t){ .func = f, .sibling = nodes[at].child };
        nodes[at].child = c;
      }
      nodes[c].value += v;
      at = c;
    }
  }
  return nodes;
}

static int open_out(out_t *o, const char *path, const char *view, const char *ext) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s.%s", path, view, ext);
  o->n = 0;
  o->bad = false;
  o->fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  return o->fd;
}

static bool close_out(out_t *o) {
  flush(o);
  return close(o->fd) == 0 && !o->bad;
}

/* Folded stacks: a line per stack with bytes of its own (self value). */
static void write_folded(out_t *o, dump_t *d, const node_t *nodes) {
  uint32_t path[FRAMES + 2], next[FRAMES + 2];
  int top = 0;
  path[0] = 0;
  next[0] = nodes[0].child;
  uint64_t self = nodes[0].value;
  for (uint32_t c = nodes[0].child; c; c = nodes[c].sibling) self -= nodes[c].value;
  if (self) putf(o, "[no stack] %llu\n", (unsigned long long)self);
  while (top >= 0) {
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    path[++top] = c;
    next[top] = nodes[c].child;
    self = nodes[c].value;
    for (uint32_t k = nodes[c].child; k; k = nodes[k].sibling) self -= nodes[k].value;
    if (!self) continue;
    for (int i = 1; i <= top; i++) {
      if (i > 1) put(o, ";", 1);
      puts_(o, d->name[nodes[path[i]].func]);
    }
    putf(o, " %llu\n", (unsigned long long)self);
  }
}

#define SVG_WIDTH 1200.0
#define SVG_ROW 16
#define SVG_TOP 40

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

/* One frame of a flame graph: a rect with its name, bytes and share on
 * hover, and a label clipped to it by a nested svg element.  A frame named
 * by address shows its object's file name without the directories. */
static void svg_frame(out_t *o, const char *name, uint64_t value, double total, double left, double y, double w) {
  uint32_t h = name_hash(name);
  const char *slash = strrchr(name, '/');
  if (name[0] == '/' && slash && strstr(slash, "+0x")) name = slash + 1;
  puts_(o, "<g><title>");
  put_xml(o, name);
  putf(o, " (%llu bytes, %.2f%%)</title><rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\" rx=\"2\" "
          "fill=\"rgb(%u,%u,%u)\"/>",
       (unsigned long long)value, total > 0 ? 100.0 * (double)value / total : 0.0, left, y, w, SVG_ROW - 1,
       200 + h % 55, 80 + (h >> 8) % 120, 40 + (h >> 16) % 50);
  if (w > 20) {
    putf(o, "<svg x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\"><text x=\"3\" y=\"11\">", left, y, w - 3, SVG_ROW);
    put_xml(o, name);
    puts_(o, "</text></svg>");
  }
  puts_(o, "</g>\n");
}

/* A flame graph: the root at the bottom, callees above their callers, each
 * frame as wide as its bytes.  Frames narrower than a tenth of a pixel are
 * left out. */
static void write_svg(out_t *o, dump_t *d, const node_t *nodes, const char *title) {
  uint32_t next[FRAMES + 2];
  double x[FRAMES + 2];
  int maxdepth = 0, top = 0;
  next[0] = nodes[0].child;
  while (top >= 0) {                        /* depth first, for the height */
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    next[++top] = nodes[c].child;
    if (top > maxdepth) maxdepth = top;
  }
  int height = SVG_TOP + (maxdepth + 1) * SVG_ROW + 30;
  double total = (double)nodes[0].value, scale = total > 0 ? (SVG_WIDTH - 20) / total : 0;
  putf(o, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
          "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
          "<style>text { font-family: Verdana, sans-serif; font-size: 11px; fill: #000; } "
          "rect:hover { stroke: #000; stroke-width: 0.5; }</style>\n"
          "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f4ec\"/>\n"
          "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" style=\"font-size: 15px\">",
       (int)SVG_WIDTH, height, (int)SVG_WIDTH, height, (int)SVG_WIDTH / 2);
  put_xml(o, title);
  puts_(o, "</text>\n");
  if (total > 0) svg_frame(o, "all", nodes[0].value, total, 10, height - 30 - SVG_ROW, SVG_WIDTH - 20);
  top = 0;
  next[0] = nodes[0].child;
  x[0] = 10;
  while (top >= 0) {
    uint32_t c = next[top];
    if (!c) { top--; continue; }
    next[top] = nodes[c].sibling;
    double w = (double)nodes[c].value * scale, left = x[top];
    x[top] += w;
    if (w < 0.1) continue;
    svg_frame(o, d->name[nodes[c].func], nodes[c].value, total, left, height - 30 - (top + 2) * SVG_ROW, w);
    top++;                                  /* into the callees, from this frame's left edge */
    next[top] = nodes[c].child;
    x[top] = left;
  }
  puts_(o, "</svg>\n");
}

static const char *const view_name[VIEWS] = { "live", "peak", "alloc" };

/* The top call sites (the innermost frame of each stack) of one view. */
static void write_top(out_t *o, dump_t *d, int view, const char *what) {
  uint64_t *by = take(&d->a, (d->nfuncs + 1) * sizeof *by), *cnt = take(&d->a, (d->nfuncs + 1) * sizeof *cnt);
  if (!by || !cnt) return;
  memset(by, 0, (d->nfuncs + 1) * sizeof *by);
  memset(cnt, 0, (d->nfuncs + 1) * sizeof *cnt);
  uint64_t total = 0;
  for (uint32_t t = 0; t < d->ntraces; t++) {
    uint32_t f = d->depth[t] ? d->funcs[t][d->depth[t] - 1] : d->nfuncs;
    by[f] += d->value[view][t];
    cnt[f] += d->count[view][t];
    total += d->value[view][t];
  }
  putf(o, "  %s: %.1f MiB\n  %12s %6s %8s  %s\n", what, (double)total / (1 << 20), "bytes", "%", "samples", "call site");
  for (int row = 0; row < 10; row++) {
    uint32_t best = UINT32_MAX;
    for (uint32_t f = 0; f <= d->nfuncs; f++)
      if (by[f] && (best == UINT32_MAX || by[f] > by[best])) best = f;
    if (best == UINT32_MAX) break;
    putf(o, "  %12llu %5.1f%% %8llu  %s\n", (unsigned long long)by[best], 100.0 * (double)by[best] / (double)total,
         (unsigned long long)cnt[best], best < d->nfuncs ? d->name[best] : "[no stack]");
    by[best] = 0;
  }
}

#define ARENA ((size_t)256 << 20)     /* room for full tables; only what is used is touched */

/* Write PATH.{live or leaks,peak,alloc}.{folded,svg}; at exit, the top call
 * sites to stderr as well.  0, or -1 if a file could not be written. */
static int dump(const char *path, bool at_exit) {
  bool was_busy = hm_prof_busy;
  hm_prof_busy = true;
  dump_t *d = os_map(ARENA);
  int rc = -1;
  if (!d) goto out;
  d->a = (arena_t){ .base = (uint8_t *)d, .used = sizeof *d, .size = ARENA };
  ssize_t len = readlink("/proc/self/exe", d->exe, sizeof d->exe - 1);
  d->exe[len > 0 ? len : 0] = 0;
  profile_lock();
  uint32_t n = d->ntraces = hm_prof.ntraces;
  d->depth = take(&d->a, n * sizeof *d->depth);
  d->funcs = take(&d->a, n * sizeof *d->funcs);
  for (int v = 0; v < VIEWS; v++) {
    d->value[v] = take(&d->a, n * sizeof(uint64_t));
    d->count[v] = take(&d->a, n * sizeof(uint64_t));
  }
  if (d->count[VIEWS - 1]) {
    for (uint32_t t = 0; t < n; t++) {
      const trace_t *tr = &hm_prof.traces[t];
      d->depth[t] = tr->depth;
      d->value[VIEW_LIVE][t] = tr->live_bytes;
      d->count[VIEW_LIVE][t] = tr->live_count;
      d->value[VIEW_PEAK][t] = tr->peak_bytes;
      d->count[VIEW_PEAK][t] = tr->peak_count;
      d->value[VIEW_ALLOC][t] = tr->alloc_bytes;
      d->count[VIEW_ALLOC][t] = tr->alloc_count;
    }
  }
  d->dropped = hm_prof.dropped;
  profile_unlock();
  if (!d->count[VIEWS - 1] || !symbolize(d)) goto unmap;
  rc = 0;
  size_t mark = d->a.used;
  for (int v = 0; v < VIEWS; v++) {
    d->a.used = mark;                       /* (each view's tree in the same room) */
    node_t *nodes = tree(d, v);
    const char *kind = v == VIEW_LIVE && at_exit ? "leaks" : view_name[v];
    char title[160];
    snprintf(title, sizeof title, "%s: %.1f MiB (hakmem heap profile, pid %d)",
             v == VIEW_LIVE ? (at_exit ? "live at exit (leaks)" : "live heap") : v == VIEW_PEAK ? "live heap at its peak" : "allocated in total",
             nodes ? (double)nodes[0].value / (1 << 20) : 0.0, (int)getpid());
    out_t *o = take(&d->a, sizeof *o);
    if (!nodes || !o) { rc = -1; break; }
    if (open_out(o, path, kind, "folded") < 0) { rc = -1; continue; }
    write_folded(o, d, nodes);
    if (!close_out(o)) rc = -1;
    if (open_out(o, path, kind, "svg") < 0) { rc = -1; continue; }
    write_svg(o, d, nodes, title);
    if (!close_out(o)) rc = -1;
  }
  if (at_exit) {
    out_t *o = take(&d->a, sizeof *o);
    if (o) {
      *o = (out_t){ .fd = hm_prof.err_fd >= 0 ? hm_prof.err_fd : 2 };
      putf(o, "hakmem: heap profile (pid %d; one sample per %ld bytes; %s.*.folded, .svg)\n", (int)getpid(), hm_prof.rate, path);
      write_top(o, d, VIEW_LIVE, "live at exit (leaks)");
      write_top(o, d, VIEW_PEAK, "live at the peak");
      write_top(o, d, VIEW_ALLOC, "allocated in total");
      if (d->dropped) putf(o, "  (%llu allocations not sampled: more than %u sampled blocks live)\n", (unsigned long long)d->dropped, SAMPLES);
      uint64_t lost = atomic_load_explicit(&hm_prof.lost, memory_order_relaxed);
      if (lost) putf(o, "  (%llu sampled blocks freed by signal handlers counted live: too many at once)\n", (unsigned long long)lost);
      flush(o);
    }
  }
unmap:
  os_unmap(d, ARENA);
out:
  hm_prof_busy = was_busy;
  return rc;
}

_Atomic int hm_prof_dump_wanted;
static _Atomic unsigned dumps;

void profile_on_signal(int sig) { atomic_store_explicit(&hm_prof_dump_wanted, 1, memory_order_relaxed); }

void profile_dump_pending(void) {
  if (!atomic_exchange_explicit(&hm_prof_dump_wanted, 0, memory_order_relaxed)) return;
  char path[320];
  snprintf(path, sizeof path, "%s.%d.%u", hm_prof.prefix, (int)getpid(), atomic_fetch_add(&dumps, 1) + 1);
  dump(path, false);
}

/* (A program may ask before its first allocation: the options are read
 * first.) */
int hm_profile_dump(const char *path) {
  heap_process_ready();
  if (!hm_profiling || !path) return -1;
  return dump(path, false);
}
/* At exit: a process that sampled nothing (a short child of a profiled
 * script) writes nothing. */
__attribute__((destructor)) static void profile_at_exit(void) {
  if (!hm_profiling || hm_prof.ntraces == 1) return;
  char path[320];
  snprintf(path, sizeof path, "%s.%d", hm_prof.prefix, (int)getpid());
  dump(path, true);
}

HM_EXPORT_HAKMEM(profile_dump)
