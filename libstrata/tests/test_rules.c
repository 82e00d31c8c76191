/* test_rules.c: the rules file (STRATA_RULES, `strata run --rules`), input a user writes, through
 * strata_rules_check, the parser the preload uses too. Valid files count their rules; each kind
 * of mistake is refused naming its line; then a fuzz: mutations of a valid file (bytes changed,
 * inserted and deleted, NULs, long tokens, lines doubled) are each accepted with 0-64 rules or
 * refused with a message, and never read or write out of bounds (this also runs under ASan).
 *
 *   test_rules [ROUNDS]    fuzz rounds (default 20000) */
#include "../../include/strata.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[] = "/tmp/strata-test-rules-XXXXXX";

static void put(const char *text, size_t len) {
  FILE *f = fopen(path, "w");
  if (!f || fwrite(text, 1, len, f) != len || fclose(f)) {
    perror("test_rules: writing the rules file");
    exit(2);
  }
}

/* strata_rules_check on `text`; err gets the message */
static int check_text(const char *text, char *err, size_t errn) {
  put(text, strlen(text));
  err[0] = 0;
  return strata_rules_check(path, err, errn);
}

static void test_valid(void) {
  char err[256];
  CHECK(check_text("", err, sizeof err) == 0);
  CHECK(check_text("# nothing\n\n   \t\n", err, sizeof err) == 0);
  CHECK(check_text("slow func=build_cache\nfast func=lookup caller=main  # hot\ntier:1 id=0x8c3f2a91d4e0b7a5\n"
                   "default func=g_malloc0\r\n",
                   err, sizeof err) == 4);
  char many[64 * 24 + 1] = "";
  for (int i = 0; i < 64; i++) strcat(many, "slow func=f\n");
  CHECK(check_text(many, err, sizeof err) == 64);
}

static int refused(const char *text, const char *want) {
  char err[256];
  return check_text(text, err, sizeof err) == -1 && strstr(err, want) != NULL;
}

static void test_mistakes(void) {
  CHECK(refused("hot func=f\n", "line 1: 'hot' is not a directive"));
  CHECK(refused("slow func=f\nslow\n", "line 2: a rule needs"));
  CHECK(refused("slow func\n", "'func' is not key=value"));
  CHECK(refused("slow func=\n", "is not key=value"));
  CHECK(refused("slow colour=red\n", "unknown key 'colour'"));
  CHECK(refused("slow id=0\n", "not a non-zero hex number"));
  CHECK(refused("slow id=0x1g\n", "not a non-zero hex number"));
  CHECK(refused("slow id=0x10000000000000000\n", "not a non-zero hex number"));
  CHECK(refused("slow caller=main\n", "caller= needs func="));
  CHECK(refused("tier:10 func=f\n", "is not a directive"));
  char name[300] = "slow func=";
  memset(name + strlen(name), 'a', 200);
  CHECK(refused(name, "name too long"));
  char many[65 * 24 + 1] = "";
  for (int i = 0; i < 65; i++) strcat(many, "slow func=f\n");
  CHECK(refused(many, "line 65: more than 64 rules"));
  char err[256];
  static char big[70000];
  memset(big, '#', sizeof big);
  put(big, sizeof big);
  CHECK(strata_rules_check(path, err, sizeof err) == -1 && strstr(err, "larger than"));
  CHECK(strata_rules_check("/nonexistent/rules", err, sizeof err) == -1 && strstr(err, "cannot open"));
  /* a message cut to a small buffer is still a terminated string */
  char small[8];
  CHECK(check_text("hot func=f\n", small, sizeof small) == -1 && strlen(small) < sizeof small);
}

static uint64_t rnd_state = 0x853c49e6748fea9bull;
static uint64_t rnd(uint64_t n) {
  return xorshift64(&rnd_state) % n;
}

static void test_fuzz(int rounds) {
  static const char *valid =
      "# placement rules\nslow func=build_cache\nfast func=lookup caller=main\n"
      "tier:1 id=0x8c3f2a91d4e0b7a5\ndefault func=g_malloc0 # last\n";
  static const char alphabet[] = "#=\n\r\t :xfunccalleridtier0123456789abcdef";
  static char buf[8192];
  int accepted = 0, rejected = 0, bad = 0;
  for (int r = 0; r < rounds; r++) {
    size_t len = strlen(valid);
    memcpy(buf, valid, len);
    for (uint64_t m = 0, n = 1 + rnd(6); m < n; m++) {
      size_t i = (size_t)rnd(len + 1);
      switch (rnd(6)) {
      case 0: /* change a byte, to anything (NUL too) */
        if (i < len) buf[i] = (char)rnd(256);
        break;
      case 1: /* change a byte to one the format gives meaning to */
        if (i < len) buf[i] = alphabet[rnd(sizeof alphabet - 1)];
        break;
      case 2: /* delete a byte */
        if (i < len) {
          memmove(buf + i, buf + i + 1, len - i - 1);
          len--;
        }
        break;
      case 3: /* insert a long token */
        if (len + 300 < sizeof buf) {
          size_t k = (size_t)rnd(300);
          memmove(buf + i + k, buf + i, len - i);
          memset(buf + i, alphabet[rnd(sizeof alphabet - 1)], k);
          len += k;
        }
        break;
      case 4: /* double the text (more rules, up to the limit and past it) */
        if (2 * len < sizeof buf) {
          memcpy(buf + len, buf, len);
          len *= 2;
        }
        break;
      default: /* insert a byte */
        if (len + 1 < sizeof buf) {
          memmove(buf + i + 1, buf + i, len - i);
          buf[i] = (char)rnd(256);
          len++;
        }
      }
    }
    put(buf, len);
    char err[128];
    err[0] = 0;
    int n = strata_rules_check(path, err, sizeof err);
    if (n >= 0 && n <= 64) accepted++;
    else if (n == -1 && err[0] && strlen(err) < sizeof err) rejected++;
    else bad++;
  }
  CHECK(bad == 0);
  CHECK(accepted > rounds / 50 && rejected > rounds / 50);
  printf("rules fuzz: %d rounds, %d accepted, %d refused\n", rounds, accepted, rejected);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 20000;
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("test_rules: mkstemp");
    return 2;
  }
  close(fd);
  test_valid();
  test_mistakes();
  test_fuzz(rounds);
  unlink(path);
  return check_done("test_rules");
}
