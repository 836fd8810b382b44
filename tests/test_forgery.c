/* Free-list forgery in the default mode (no HAKMEM_SECURE): a program with a
 * use-after-free can read and write a freed block, and tries to make malloc
 * return an address of its choice (a global here).  The mark of a freed block
 * does not decode its link, and a link that leads out of its page (a page's
 * list) or to anything but a free block of its class (a thread cache) is
 * reported before malloc returns a block, even by an attacker who recovers a
 * list's key from two blocks whose addresses it knows. */
#include "test.h"
#include "hakmem.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static _Alignas(64) unsigned char target[8192];

static void say(const char *s) {
  if (write(2, s, strlen(s)) < 0) _exit(4);
}

/* Two mallocs of n after the forgery: the second follows the forged link. */
static void follow(size_t n) {
  void *x = hakmem_malloc(n), *y = hakmem_malloc(n);
  if (x == target || y == target) {
    say("malloc returned the attacker's address\n");
    _exit(3);
  }
  say("no report\n");
  _exit(2);
}

static void expect_report(void (*attack)(void), const char *what) {
  char msg[2048];
  int st = run_in_child(attack, msg, sizeof msg);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, "corrupted free list"),
         "%s: expected SIGABRT and \"corrupted free list\", got status %#x and \"%.200s\"", what, st, msg);
}

/* The attack that worked when the mark was the links' key: key = word 0,
 * link = target ^ key. */
static size_t attack_size;
static void mark_as_key(void) {
  uintptr_t *a = hakmem_malloc(attack_size);
  hakmem_free(a);
  a[1] = (uintptr_t)target ^ a[0];
  follow(attack_size);
}

/* An attacker who knows the encoding (next ^ key ^ the block's address) and
 * two freed blocks: b, freed last, links to a, so key = b[1] ^ a ^ b. */
static void known_key(void) {
  uintptr_t *a = hakmem_malloc(attack_size), *b = hakmem_malloc(attack_size);
  hakmem_free(a);
  hakmem_free(b);
  uintptr_t key = b[1] ^ (uintptr_t)a ^ (uintptr_t)b;
  b[1] = (uintptr_t)target ^ key ^ (uintptr_t)b;
  follow(attack_size);
}

/* Each attack on a 64-byte block (its page's list) and an 8 KiB one (a
 * thread cache). */
static void on_both_lists(void (*attack)(void), const char *what) {
  static const size_t sizes[] = {64, 8192};
  for (size_t i = 0; i < 2; i++) {
    char label[128];
    snprintf(label, sizeof label, "%zu B, %s", sizes[i], what);
    attack_size = sizes[i];
    expect_report(attack, label);
  }
}
TEST(mark_does_not_decode_a_link) { on_both_lists(mark_as_key, "link = target ^ mark"); }
TEST(recovered_key_cannot_lead_out) { on_both_lists(known_key, "link forged with the recovered key"); }

/* One byte written at offset 8 of a freed 16-byte block (the link's low
 * byte): the next malloc but one would return a misaligned block. */
static void one_byte(void) {
  unsigned char *a = hakmem_malloc(16), *b = hakmem_malloc(16);
  hakmem_free(a);
  hakmem_free(b);
  b[8] ^= 0x08;
  void *x = hakmem_malloc(16), *y = hakmem_malloc(16);
  if (((uintptr_t)x | (uintptr_t)y) & 15) {
    say("malloc returned a misaligned block\n");
    _exit(3);
  }
  say("no report\n");
  _exit(2);
}
TEST(one_byte_write_into_a_link) { expect_report(one_byte, "16 B, one byte of the link changed"); }

/* What a freed block shows: its mark, and a link that neither the mark nor
 * the mark with the block's address decodes. */
TEST(freed_block_shows_no_key) {
  for (size_t n = 16; n <= 65536; n *= 4) {
    uintptr_t *a = hakmem_malloc(n), *b = hakmem_malloc(n);
    hakmem_free(a);
    hakmem_free(b);
    uintptr_t next = (uintptr_t)a;
    CHECKF((b[1] ^ b[0]) != next && (b[1] ^ b[0] ^ (uintptr_t)b) != next,
           "%zu B: the mark decodes the link", n);
    CHECKF(b[0] != 0 && b[1] != next, "%zu B: a freed block's words are the mark and an encoded link", n);
    void *x = hakmem_malloc(n), *y = hakmem_malloc(n);
    CHECKF(x == b && y == a, "%zu B: the last freed comes back first (%p %p, freed %p %p)", n, x, y, (void *)b, (void *)a);
    hakmem_free(x);
    hakmem_free(y);
  }
}

TEST_MAIN()
