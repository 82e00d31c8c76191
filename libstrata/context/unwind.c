/* unwind.c: walking the caller's stack from inside malloc, fast and without trusting rbp.
 *
 * Code built without frame pointers (Debian's redis, perl, python) keeps anything in rbp, so
 * a frame-pointer walk stops at the first such frame: every allocation of a wrapper like
 * redis's zmalloc looked alike. The unwind tables (.eh_frame, which x86-64 code carries for
 * exceptions and debuggers) say, for every instruction, where the caller's frame ends (the
 * CFA: rsp or rbp plus an offset) and where rbp was saved. This file reads that rule once per
 * return address, from the module's file (the FDE found through .eh_frame_hdr, read with pread:
 * below), keeps it in a lock-free table, and walks with it: per frame one table probe and two loads from the
 * stack, every load checked to lie in [sp, top of stack). A return address without a rule
 * we can follow (no unwind information, a signal frame, a CFA computed by an expression)
 * ends the walk there. x86-64 only; elsewhere the walk is the caller's return address. */
#include "internal.h"

#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

/* Where code lives, as (module, offset): the load address of a program or library changes
 * from run to run (ASLR), a return address's offset in its module and the module's file name do
 * not, so the same binaries give the same context ids in every run and on every machine, and an
 * `id=` rule copied from a report matches the next run. Each thread keeps the modules of the
 * code pages it met; a page it has not met is looked up in the loader's list (dl_iterate_phdr,
 * which neither allocates nor calls back into malloc). An address outside every module (code
 * generated at run time, or a word past the outermost frame, such as the stack address a walk
 * finds above _start) counts as nothing: it would differ from run to run. */
typedef struct {
  uintptr_t page; /* 0: empty */
  uintptr_t base;
  uint64_t name;
} module_slot_t;
#define MODULE_SLOTS 64
static __thread module_slot_t module_slots[MODULE_SLOTS] __attribute__((tls_model("initial-exec")));

typedef struct {
  uintptr_t addr, base;
  uint64_t name;
} module_find_t;

static uint64_t name_hash(const char *path) {
  const char *base = path;
  for (const char *p = path; *p; p++)
    if (*p == '/') base = p + 1;
  uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a of the file name: the same in /lib and /usr/lib */
  for (const char *p = base; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001B3ull;
  return h;
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  module_find_t *f = arg;
  (void)size;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && f->addr >= start && f->addr - start < ph->p_memsz) {
      f->base = info->dlpi_addr;
      f->name = name_hash(info->dlpi_name ? info->dlpi_name : ""); /* the program itself: "" */
      return 1;
    }
  }
  return 0;
}

/* addr as an offset in its module, mixed with the module's name. */
static uint64_t code_place(uint64_t addr) {
  uintptr_t page = (uintptr_t)addr >> 12;
  module_slot_t *s = &module_slots[(page * 0x9E3779B97F4A7C15ull) >> 58];
  if (s->page != page) {
    module_find_t f = {(uintptr_t)addr, 0, 0};
    bool found = dl_iterate_phdr(module_cb, &f) == 1;
    *s = (module_slot_t){page, found ? f.base : 0, found ? f.name : 0};
  }
  return s->name ? (addr - s->base) ^ s->name : 0;
}

/* One hash of a stack, whichever walker took it (a context id mixes in the size class). */
uint64_t _strata_hash_frames(const uint64_t *f, int n) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; i++) {
    h ^= code_place(f[i]);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

#if defined(__x86_64__)

struct dwarf_eh_bases {
  void *tbase, *dbase, *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases); /* libgcc */

/* A frame's rule in 16 bits: bit 15 the CFA's base (0 rsp, 1 rbp), bits 4-14 its offset / 8,
 * bits 0-3 where rbp was saved (CFA - 8n; 0: this frame does not save it). */
#define RULE_STOP 0xFFFF
#define RULE_RBP 0x8000
#define RULE_OFF_MAX (2047 * 8)

enum { REG_RBP = 6, REG_RSP = 7 };

/* ---- reading .eh_frame -------------------------------------------------------------------- */

typedef struct {
  const uint8_t *p, *end;
  bool bad;
} cursor_t;

static uint64_t uleb(cursor_t *c) {
  uint64_t v = 0;
  for (unsigned shift = 0; c->p < c->end && shift < 64; shift += 7) {
    uint8_t b = *c->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  c->bad = true;
  return 0;
}

static int64_t sleb(cursor_t *c) {
  int64_t v = 0;
  unsigned shift = 0;
  for (; c->p < c->end && shift < 64; shift += 7) {
    uint8_t b = *c->p++;
    v |= (int64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      if (shift + 7 < 64 && (b & 0x40)) v |= -((int64_t)1 << (shift + 7));
      return v;
    }
  }
  c->bad = true;
  return 0;
}

static uint64_t fixed(cursor_t *c, size_t n) {
  if ((size_t)(c->end - c->p) < n) {
    c->bad = true;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, c->p, n);
  c->p += n;
  return v;
}

/* Skip a pointer in DW_EH_PE encoding `enc`; returns its value when absolute or pc-relative
 * (what the CIE's code pointers use), 0 for the encodings only skipped. */
static uint64_t pointer(cursor_t *c, uint8_t enc) {
  if (enc == 0xff) return 0; /* omitted */
  const uint8_t *at = c->p;
  uint64_t v;
  switch (enc & 0x0f) {
    case 0x00: v = fixed(c, 8); break;
    case 0x01: v = uleb(c); break;
    case 0x02: v = fixed(c, 2); break;
    case 0x03: v = fixed(c, 4); break;
    case 0x04: v = fixed(c, 8); break;
    case 0x09: v = (uint64_t)sleb(c); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)fixed(c, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)fixed(c, 4); break;
    case 0x0c: v = fixed(c, 8); break;
    default: c->bad = true; return 0;
  }
  return (enc & 0x70) == 0x10 ? (uint64_t)(uintptr_t)at + v : v;
}

/* The CFA rule and rbp's rule while the CFI program runs. */
typedef struct {
  int cfa_reg;
  int64_t cfa_off;
  int rbp; /* 0 unchanged, >0 saved at CFA - 8*rbp, -1 anything else (lost) */
} row_t;

/* Run CFI instructions until the row for `target` (code address) is reached; false when the
 * program uses what this walker does not follow. `initial` is the CIE's row (for restore). */
static bool run_cfi(cursor_t *c, uintptr_t *loc, uintptr_t target, uint64_t code_align, int64_t data_align,
                    row_t *r, const row_t *initial) {
  row_t saved[8];
  int nsaved = 0;
  while (c->p < c->end && !c->bad) {
    uint8_t op = *c->p++;
    uint64_t reg, delta = 0;
    int64_t off;
    switch (op & 0xc0) {
      case 0x40: delta = (op & 0x3f) * code_align; goto advance;
      case 0x80: /* offset: reg saved at CFA + off * data_align */
        off = (int64_t)uleb(c) * data_align;
        if ((op & 0x3f) == REG_RBP) r->rbp = off < 0 && -off % 8 == 0 && -off / 8 <= 15 ? (int)(-off / 8) : -1;
        continue;
      case 0xc0:
        if ((op & 0x3f) == REG_RBP) r->rbp = initial->rbp;
        continue;
    }
    switch (op) {
      case 0x00: continue; /* nop */
      case 0x02: delta = fixed(c, 1) * code_align; goto advance;
      case 0x03: delta = fixed(c, 2) * code_align; goto advance;
      case 0x04: delta = fixed(c, 4) * code_align; goto advance;
      case 0x05: /* offset_extended */
      case 0x11: /* offset_extended_sf */
        reg = uleb(c);
        off = (op == 0x05 ? (int64_t)uleb(c) : sleb(c)) * data_align;
        if (reg == REG_RBP) r->rbp = off < 0 && -off % 8 == 0 && -off / 8 <= 15 ? (int)(-off / 8) : -1;
        continue;
      case 0x06: /* restore_extended */
        if (uleb(c) == REG_RBP) r->rbp = initial->rbp;
        continue;
      case 0x07: /* undefined */
      case 0x09: /* register */
        if (uleb(c) == REG_RBP) r->rbp = -1;
        if (op == 0x09) uleb(c);
        continue;
      case 0x08: /* same_value */
        if (uleb(c) == REG_RBP) r->rbp = 0;
        continue;
      case 0x0a:
        if (nsaved == 8) return false;
        saved[nsaved++] = *r;
        continue;
      case 0x0b:
        if (!nsaved) return false;
        *r = saved[--nsaved];
        continue;
      case 0x0c: r->cfa_reg = (int)uleb(c); r->cfa_off = (int64_t)uleb(c); continue;
      case 0x0d: r->cfa_reg = (int)uleb(c); continue;
      case 0x0e: r->cfa_off = (int64_t)uleb(c); continue;
      case 0x12: r->cfa_reg = (int)uleb(c); r->cfa_off = sleb(c) * data_align; continue;
      case 0x13: r->cfa_off = sleb(c) * data_align; continue;
      case 0x10: /* expression: a register's place computed */
      case 0x16: /* val_expression */
        reg = uleb(c);
        if (reg == REG_RBP) r->rbp = -1;
        c->p += uleb(c);
        continue;
      case 0x14: /* val_offset */
        if (uleb(c) == REG_RBP) r->rbp = -1;
        uleb(c);
        continue;
      case 0x15: /* val_offset_sf */
        if (uleb(c) == REG_RBP) r->rbp = -1;
        sleb(c);
        continue;
      case 0x2e: uleb(c); continue; /* GNU_args_size */
      default: return false; /* def_cfa_expression, set_loc, vendor ops: not followed */
    }
  advance:
    if (*loc + delta > target) return true;
    *loc += delta;
  }
  return !c->bad;
}

/* ---- finding a return address's FDE -------------------------------------------------------
 * In the module's file, with pread: the binary search of .eh_frame_hdr's table and the FDE and
 * CIE it leads to are read from the page cache, not through the module's mapping, where every
 * page read would be mapped into the program with the 64 KiB around it (fault-around) and count
 * in its resident set: 0.9 MiB of redis-server's 15 (`strata bench alloc --program`). A module
 * with no file (the vDSO), a table encoded otherwise than the linkers write it, or a file that
 * cannot be opened falls back to libgcc's _Unwind_Find_FDE, which reads the mapping. */

typedef struct {
  uintptr_t pc;
  uintptr_t base;             /* load bias */
  uint64_t name;              /* name_hash of the file */
  const char *path;           /* the file ("" for the program itself) */
  const ElfW(Phdr) *phdr;
  int phnum;
  uintptr_t hdr;              /* .eh_frame_hdr's module address, 0: none */
} fde_find_t;

static int fde_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  fde_find_t *f = arg;
  (void)size;
  bool here = false;
  uintptr_t hdr = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && f->pc >= info->dlpi_addr + ph->p_vaddr &&
        f->pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
      here = true;
    if (ph->p_type == PT_GNU_EH_FRAME) hdr = ph->p_vaddr;
  }
  if (!here) return 0;
  f->base = info->dlpi_addr;
  f->path = info->dlpi_name ? info->dlpi_name : "";
  f->name = name_hash(f->path);
  f->phdr = info->dlpi_phdr;
  f->phnum = info->dlpi_phnum;
  f->hdr = hdr;
  return 1;
}

/* The module's file, opened for one lookup and closed after it: a descriptor kept would be one
 * the program did not open (a program that closes every descriptor, or counts them, would meet
 * it). A lookup happens once per return address. */
static int module_open(const fde_find_t *f) {
  const char *path = f->path[0] ? f->path : "/proc/self/exe";
  return path[0] == '/' ? open(path, O_RDONLY | O_CLOEXEC) : -1;
}

#define FDE_MAX 2048 /* bytes: an FDE or CIE above this is not followed */

/* pread up to `n` bytes at module address `vaddr` of the module's file, as many as its segment
 * holds and at least `need` (else false); the rest of `out` zeroed. */
static bool read_some(int fd, const fde_find_t *f, uintptr_t vaddr, void *out, size_t n, size_t need) {
  for (int i = 0; i < f->phnum; i++) {
    const ElfW(Phdr) *ph = &f->phdr[i];
    if (ph->p_type != PT_LOAD || vaddr < ph->p_vaddr || vaddr + need > ph->p_vaddr + ph->p_filesz) continue;
    size_t have = ph->p_vaddr + ph->p_filesz - vaddr;
    size_t want = have < n ? have : n;
    memset((char *)out + want, 0, n - want);
    return pread(fd, out, want, (off_t)(ph->p_offset + (vaddr - ph->p_vaddr))) == (ssize_t)want;
  }
  return false;
}

/* exactly `n` bytes */
static bool read_at(int fd, const fde_find_t *f, uintptr_t vaddr, void *out, size_t n) {
  return read_some(fd, f, vaddr, out, n, n);
}

static int fde_in(int fd, const fde_find_t *f, uintptr_t pc, uint8_t *fde, uint8_t *cie, uintptr_t *func);

/* The FDE covering `pc` (its bytes into fde, its CIE's into cie) and the function's start, from
 * the module's file; 1 found, 0 no FDE covers pc, -1 use libgcc's search instead. */
static int fde_from_file(uintptr_t pc, uint8_t *fde, uint8_t *cie, uintptr_t *func) {
  fde_find_t f = {.pc = pc};
  if (dl_iterate_phdr(fde_cb, &f) != 1 || !f.hdr) return -1;
  int fd = module_open(&f);
  if (fd < 0) return -1;
  int found = fde_in(fd, &f, pc, fde, cie, func);
  close(fd);
  return found;
}

static int fde_in(int fd, const fde_find_t *f, uintptr_t pc, uint8_t *fde, uint8_t *cie, uintptr_t *func) {
  uint8_t h[12];
  if (!read_at(fd, f, f->hdr, h, sizeof h)) return -1;
  /* version 1; eh_frame_ptr any 4-byte encoding; the count udata4; the table datarel sdata4 */
  if (h[0] != 1 || (h[1] & 0x0f) != 0x0b || h[2] != 0x03 || h[3] != 0x3b) return -1;
  uint32_t count;
  memcpy(&count, h + 8, 4);
  int64_t rel = (int64_t)(pc - (f->base + f->hdr)); /* pc, as the table's entries count */
  /* the last entry whose start is <= pc: halving by single entries until a block of them fits
   * one read, then in the block */
  enum { BLOCK = 256 };
  int32_t e[2 * BLOCK];
  uint32_t lo = 0, hi = count;
  while (hi - lo > BLOCK) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (!read_at(fd, f, f->hdr + 12 + (uintptr_t)mid * 8, e, 4)) return -1;
    if ((int64_t)e[0] <= rel) lo = mid;
    else hi = mid;
  }
  if (hi == lo || !read_at(fd, f, f->hdr + 12 + (uintptr_t)lo * 8, e, (size_t)(hi - lo) * 8)) return 0;
  uint32_t k = 0;
  while (k + 1 < hi - lo && (int64_t)e[2 * (k + 1)] <= rel) k++;
  if ((int64_t)e[2 * k] > rel) return 0;
  uintptr_t fde_at = f->hdr + (uintptr_t)(intptr_t)e[2 * k + 1];
  *func = f->base + f->hdr + (uintptr_t)(intptr_t)e[2 * k];
  /* the FDE and its CIE, each in one read of at most FDE_MAX bytes (less at a segment's end) */
  uint32_t len, delta, cie_len;
  if (!read_some(fd, f, fde_at, fde, FDE_MAX, 8)) return 0;
  memcpy(&len, fde, 4);
  memcpy(&delta, fde + 4, 4);
  if (len < 8 || len + 4 > FDE_MAX || !delta) return 0;
  uintptr_t cie_at = fde_at + 4 - delta;
  if (!read_some(fd, f, cie_at, cie, FDE_MAX, 8)) return 0;
  memcpy(&cie_len, cie, 4);
  return cie_len >= 5 && cie_len + 4 <= FDE_MAX ? 1 : 0;
}

/* The rule for the frame of the function `ra` returns into. */
static unsigned rule_for(uintptr_t ra) {
  uint8_t fde_buf[FDE_MAX], cie_buf[FDE_MAX];
  const uint8_t *fde = fde_buf, *cie = cie_buf;
  uintptr_t func;
  int found = fde_from_file(ra - 1, fde_buf, cie_buf, &func);
  if (found == 0) return RULE_STOP;
  if (found < 0) {
    struct dwarf_eh_bases bases;
    fde = _Unwind_Find_FDE((void *)(ra - 1), &bases);
    if (!fde) return RULE_STOP;
    uint32_t cie_delta;
    memcpy(&cie_delta, fde + 4, 4);
    if (!cie_delta) return RULE_STOP;
    cie = fde + 4 - cie_delta;
    func = (uintptr_t)bases.func;
  }
  uint32_t fde_len, cie_len;
  memcpy(&fde_len, fde, 4);
  memcpy(&cie_len, cie, 4);
  if (fde_len == 0xffffffff || cie_len == 0xffffffff) return RULE_STOP; /* 64-bit DWARF: not emitted for code */
  cursor_t c = {cie + 9, cie + 4 + cie_len, false}; /* past length, id, version */
  const char *aug = (const char *)c.p;
  size_t auglen = strnlen(aug, (size_t)(c.end - c.p));
  if (auglen == (size_t)(c.end - c.p)) return RULE_STOP;
  c.p += auglen + 1;
  if (cie[8] == 4) c.p += 2; /* address and segment sizes */
  uint64_t code_align = uleb(&c);
  int64_t data_align = sleb(&c);
  if (cie[8] == 1) c.p++; /* return address register: a byte in version 1 */
  else uleb(&c);
  uint8_t fde_enc = 0;
  if (aug[0] == 'z') {
    uint64_t n = uleb(&c);
    const uint8_t *after = c.p + n;
    for (const char *a = aug + 1; *a && !c.bad; a++) {
      if (*a == 'R') fde_enc = (uint8_t)fixed(&c, 1);
      else if (*a == 'L') fixed(&c, 1);
      else if (*a == 'P') pointer(&c, (uint8_t)fixed(&c, 1));
      else if (*a == 'S') return RULE_STOP; /* a signal frame */
      else if (*a != 'B') return RULE_STOP;
    }
    c.p = after;
  } else if (aug[0]) {
    return RULE_STOP;
  }
  if (c.p > c.end) return RULE_STOP;
  row_t row = {REG_RSP, 8, 0};
  uintptr_t loc = func;
  if (c.bad || !run_cfi(&c, &loc, UINTPTR_MAX, code_align, data_align, &row, &row)) return RULE_STOP;
  row_t initial = row;
  cursor_t f = {fde + 8, fde + 4 + fde_len, false};
  pointer(&f, fde_enc & 0x0f);                   /* pc_begin (func has it) */
  uint64_t range = pointer(&f, fde_enc & 0x0f); /* pc_range */
  if (ra - 1 - func >= range) return RULE_STOP;  /* in a gap between functions */
  if (aug[0] == 'z') f.p += uleb(&f);
  if (f.p > f.end) return RULE_STOP;
  loc = func;
  if (f.bad || !run_cfi(&f, &loc, ra - 1, code_align, data_align, &row, &initial)) return RULE_STOP;
  if (row.cfa_reg != REG_RSP && row.cfa_reg != REG_RBP) return RULE_STOP;
  if (row.cfa_off < 8 || row.cfa_off > RULE_OFF_MAX || row.cfa_off % 8 || row.rbp < 0) return RULE_STOP;
  unsigned rule = (row.cfa_reg == REG_RBP ? RULE_RBP : 0) | (unsigned)(row.cfa_off / 8) << 4 | (unsigned)row.rbp;
  return rule; /* (RULE_STOP itself would be rbp + 16376 with rbp at CFA - 120: never a real frame) */
}

/* ---- the table: return address -> rule ------------------------------------------------------
 * One 64-bit word per return address, pc << 16 | rule. Open addressing, never removed;
 * words are written whole, so readers need no lock. */
#define RULE_SLOTS 16384
#define RULE_PROBES 16
static _Atomic uint64_t rules[RULE_SLOTS];

static unsigned rule_of(uintptr_t pc) {
  if (!pc || pc >> 47) return RULE_STOP;
  size_t i = (size_t)((pc * 0x9E3779B97F4A7C15ull) >> 50);
  for (size_t k = 0; k < RULE_PROBES; k++, i = (i + 1) % RULE_SLOTS) {
    uint64_t e = atomic_load_explicit(&rules[i], memory_order_relaxed);
    if (e >> 16 == pc) return (unsigned)(e & 0xFFFF);
    if (e) continue;
    unsigned r = rule_for(pc); /* first time: read the tables, then keep it */
    uint64_t want = (uint64_t)pc << 16 | r;
    if (atomic_compare_exchange_strong_explicit(&rules[i], &e, want, memory_order_relaxed, memory_order_relaxed))
      return r;
    if (e >> 16 == pc) return (unsigned)(e & 0xFFFF); /* another thread learnt it */
  }
  return rule_for(pc); /* the table is full around it: correct, only slower */
}

/* ---- the last walks of this thread, checked instead of redone -------------------------------
 * A walk is a function of where it starts (return address, stack pointer, rbp) and of the
 * words it reads on the way: the return addresses and saved rbp values at known distances
 * above the stack pointer. Allocation sites repeat, so each thread keeps its recent walks by
 * start and, on the next capture from the same start, compares those words instead of
 * walking: the same words give the same walk, exactly. */
#define WALKS 32
typedef struct {
  uintptr_t ret, sp, rbp; /* the start; ret 0: empty */
  uint8_t n, nrbp;
  bool uses_rbp; /* the walk read the starting rbp (else any rbp gives the same walk) */
  uint16_t ra_at[STRATA_CONTEXT_FRAMES];  /* frames[i + 1] was read at sp + ra_at[i] */
  uint16_t rbp_at[STRATA_CONTEXT_FRAMES]; /* rbp_val[i] was read at sp + rbp_at[i] */
  uintptr_t rbp_val[STRATA_CONTEXT_FRAMES];
  uint64_t frames[STRATA_CONTEXT_FRAMES], hash, used;
} walk_t;
static __thread walk_t walks[WALKS] __attribute__((tls_model("initial-exec")));

/* Walk from scratch into w; false when a word it read lies too far up to be checked later
 * (the walk is still right, only not kept). Of the rbp values restored on the way, only
 * those a frame then takes its CFA from are kept to check: the others change nothing. */
static bool walk(walk_t *w, uintptr_t stack_hi, int depth) {
  uintptr_t pc = w->ret, sp = w->sp, rbp = w->rbp, start = w->sp, rbp_at = 0;
  bool keep = true, rbp_from_start = true, rbp_checked = false;
  int n = 0, nrbp = 0;
  w->uses_rbp = false;
  while (n < depth && pc) {
    w->frames[n++] = pc;
    unsigned r = rule_of(pc);
    if (r == RULE_STOP) break;
    if (r & RULE_RBP && !rbp_checked) { /* this frame's place depends on rbp: check it */
      rbp_checked = true;
      if (rbp_from_start) w->uses_rbp = true;
      else {
        w->rbp_at[nrbp] = (uint16_t)(rbp_at - start);
        w->rbp_val[nrbp++] = rbp;
      }
    }
    uintptr_t base = r & RULE_RBP ? rbp : sp;
    uintptr_t cfa = base + ((r >> 4) & 0x7ff) * 8;
    unsigned saved = r & 0xf;
    if (base < sp || cfa <= sp || cfa > stack_hi || cfa - saved * 8 < sp) break; /* our stack, upwards */
    if (cfa - start > UINT16_MAX) keep = false;
    if (saved) {
      rbp_at = cfa - saved * 8;
      rbp = *(const uintptr_t *)rbp_at;
      rbp_from_start = rbp_checked = false;
    }
    pc = ((const uintptr_t *)cfa)[-1];
    w->ra_at[n - 1] = (uint16_t)(cfa - 8 - start);
    sp = cfa;
  }
  w->n = (uint8_t)n;
  w->nrbp = (uint8_t)nrbp;
  w->hash = _strata_hash_frames(w->frames, n);
  return keep;
}

static bool still_valid(const walk_t *w) {
  const uint8_t *base = (const uint8_t *)w->sp;
  for (int i = 0; i + 1 < w->n; i++)
    if (*(const uintptr_t *)(base + w->ra_at[i]) != w->frames[i + 1]) return false;
  for (int i = 0; i < w->nrbp; i++)
    if (*(const uintptr_t *)(base + w->rbp_at[i]) != w->rbp_val[i]) return false;
  return true;
}

static bool same_walk(const walk_t *w, uintptr_t ret, uintptr_t sp, uintptr_t rbp) {
  return w->ret == ret && w->sp == sp && (w->rbp == rbp || !w->uses_rbp) && still_valid(w);
}

const uint64_t *_strata_unwind(uintptr_t ret, uintptr_t sp, uintptr_t rbp, uintptr_t stack_hi, int depth,
                               int *n, uint64_t *hash) {
  /* two ways per start: two call paths may meet at one return address and stack depth */
  static __thread uint64_t clock __attribute__((tls_model("initial-exec")));
  size_t i = (size_t)(((ret ^ sp) * 0x9E3779B97F4A7C15ull) >> 59) & ~(size_t)1;
  walk_t *w = &walks[i];
  if (!same_walk(w, ret, sp, rbp)) {
    walk_t *other = &walks[i + 1];
    if (same_walk(other, ret, sp, rbp)) w = other;
    else {
      if (other->used < w->used) w = other; /* the least recently used of the two */
      w->ret = ret;
      w->sp = sp;
      w->rbp = rbp;
      if (!walk(w, stack_hi, depth)) w->ret = 0; /* right this time, but not to be checked */
    }
  }
  w->used = ++clock;
  *n = w->n;
  *hash = w->hash;
  return w->frames;
}

#else

static __thread uint64_t only_ret[1];

const uint64_t *_strata_unwind(uintptr_t ret, uintptr_t sp, uintptr_t rbp, uintptr_t stack_hi, int depth,
                               int *n, uint64_t *hash) {
  only_ret[0] = ret;
  *n = 1;
  *hash = _strata_hash_frames(only_ret, 1);
  return only_ret;
}

#endif
