/* strata_channel.h: what a process running under Strata shares with a tiering daemon.
 *
 * One region per process in shared memory, fixed layout, versioned. The process creates it
 * as an anonymous memfd named STRATA_CHANNEL_NAME, sealed against shrinking and growing
 * (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so the region lives exactly as long as the
 * process, nobody can plant or open it by name, and nobody can resize it under a reader. A
 * daemon is handed it with the process's hello (SCM_RIGHTS), or finds it, when it starts after
 * the process, as the /proc/<pid>/fd/N link that reads "/memfd:strata.channel (deleted)"
 * (root, or the same user). A daemon reads it only after checking the seals, its size and its
 * owner (docs/security.md). Laid out as:
 *
 *   strata_channel_header_t                       (offset 0)
 *   strata_context_t   contexts[context_capacity] (offset contexts_offset)
 *   strata_object_t    objects[object_capacity]   (offset objects_offset)
 *
 * The process writes contexts and objects (its tracked objects, and its arenas' pages); a
 * daemon reads them and may write `directive` of a context (where its next allocations go)
 * and the header's `default_directive` (where allocations go whose context has the default
 * directive, or that have no context). All counters are 64-bit and updated with relaxed
 * atomics: a reader sees each field whole, not a consistent snapshot of all of them.
 * A Rust mirror lives in crates/strata-sys (checked against this file by a test).
 *
 * A process announces itself to a running daemon when it makes its region: it connects to the
 * daemon's socket (STRATA_DAEMON_SOCKET, default /run/strata/stratad.sock) and writes one line,
 * {"op":"hello","pid":N}, with the region's descriptor attached. The daemon takes a hello only
 * from process N itself (SO_PEERCRED). Nothing depends on it: a daemon also finds regions by
 * looking.
 */
#ifndef STRATA_CHANNEL_H
#define STRATA_CHANNEL_H

#include <stdint.h>

#define STRATA_CHANNEL_MAGIC 0x4c4e484341525453ull /* "STRACHNL" */
#define STRATA_CHANNEL_VERSION 6 /* 6: arenas' records; 5: contexts[] filled in order; 4: a sealed memfd */
#define STRATA_CHANNEL_NAME "strata.channel" /* the memfd's name, as /proc/<pid>/fd shows it */
#define STRATA_DAEMON_SOCKET_DEFAULT "/run/strata/stratad.sock"
#define STRATA_CONTEXT_FRAMES 16   /* return addresses kept per context (bkmalloc: 16) */
#define STRATA_OBJECT_RECORD_MAX ((uint64_t)64 << 20) /* large objects split in 64 MiB records */
/* the tables' sizes libstrata makes, and the most a daemon accepts */
#define STRATA_CONTEXT_CAPACITY ((uint64_t)1 << 16) /* tags are 16 bits */
#define STRATA_OBJECT_CAPACITY ((uint64_t)1 << 20)

/* priority values (STRATA_PRIORITY): a process's claim on the fast tier, higher first; any
 * integer in [STRATA_PRIORITY_MIN, STRATA_PRIORITY_MAX] */
#define STRATA_PRIORITY_LOW (-10)
#define STRATA_PRIORITY_NORMAL 0
#define STRATA_PRIORITY_HIGH 10
#define STRATA_PRIORITY_MIN (-1000)
#define STRATA_PRIORITY_MAX 1000

/* tracking bits: how a daemon can observe this process's memory from outside */
enum {
  /* Strata's memory (segments and large mappings) is registered with this process's
   * userfaultfd for asynchronous write-protect (Linux 6.7+): a daemon finds the pages written
   * since its last scan with PAGEMAP_SCAN on /proc/PID/pagemap (PM_SCAN_WP_MATCHING), which
   * also protects them again */
  STRATA_TRACKING_WP_ASYNC = 1,
  /* the process's userfaultfd can move pages (UFFDIO_MOVE, Linux 6.8+) and handle the
   * kernel's own faults: its agent can migrate Strata's pages transactionally */
  STRATA_TRACKING_MOVE = 2,
};

/* directive values: where a context's new objects go */
enum {
  STRATA_DIRECTIVE_DEFAULT = 0, /* the default arena (unbound) */
  STRATA_DIRECTIVE_FAST = 1,    /* the fastest tier */
  STRATA_DIRECTIVE_SLOW = 2,    /* the slowest tier */
  STRATA_DIRECTIVE_TIER0 = 3,   /* tier n is STRATA_DIRECTIVE_TIER0 + n */
};

typedef struct strata_channel_header_s {
  uint64_t magic;             /* STRATA_CHANNEL_MAGIC */
  uint32_t version;           /* STRATA_CHANNEL_VERSION */
  uint32_t header_bytes;      /* sizeof(strata_channel_header_t) */
  int64_t pid;
  uint64_t context_capacity;  /* entries in contexts[] (a power of two) */
  uint64_t context_bytes;     /* sizeof(strata_context_t) */
  uint64_t contexts_offset;
  uint64_t object_capacity;   /* entries in objects[] */
  uint64_t object_bytes;      /* sizeof(strata_object_t) */
  uint64_t objects_offset;
  uint64_t objects_high;      /* objects[0..objects_high) have ever been used */
  uint64_t contexts_used;     /* contexts made: entries 1..contexts_used (see below) */
  uint64_t contexts_dropped;  /* allocations whose context did not fit in the table */
  uint64_t objects_dropped;   /* tracked objects that did not fit in objects[] */
  int32_t default_directive;  /* STRATA_DIRECTIVE_*: the process's default; the daemon may rewrite it */
  int32_t priority;           /* STRATA_PRIORITY: the process's own claim (a daemon may override it) */
  uint32_t tracking;          /* STRATA_TRACKING_* bits */
  uint32_t reserved;
} strata_channel_header_t;

/* One allocation context: hash of the call stack and the size class. The process fills
 * contexts[] in order from index 1 (its lookup by id is its own); an entry with id 0 is empty.
 * Index 0 is never used (0 = no context). */
typedef struct strata_context_s {
  uint64_t id;                /* 0 = empty */
  uint32_t size_class;        /* Strata size class of the allocations (0: above 64 KiB) */
  int32_t directive;          /* STRATA_DIRECTIVE_*; the daemon may rewrite it */
  uint64_t allocs, frees, live_objects, live_bytes, bytes_allocated;
  uint32_t nframes;           /* valid entries in frames[] */
  uint32_t rule;              /* 1 + index of the rule that set the directive, 0 none */
  uint64_t frames[STRATA_CONTEXT_FRAMES]; /* return addresses, innermost first */
} strata_context_t;

/* One tracked object (>= the tracking threshold, page aligned), or a 64 MiB record of one; or
 * pages of a user arena (strata_arena_new): its mixed pages, runs and large mappings, each
 * recorded with the arena's number and its binding, the program's hint. A daemon may move an
 * arena's records together, as one unit, and weigh its hint against what it measures. */
typedef struct strata_object_s {
  uint64_t addr;              /* 0 = free slot */
  uint64_t len;
  uint32_t context;           /* index into contexts[]; 0 for an arena's pages */
  uint32_t next;              /* next record of the same object, 0 = last */
  uint32_t arena;             /* the user arena holding these pages (a number of the process's,
                               * not reused while it lives), 0 = none */
  int32_t hint;               /* an arena's binding as a STRATA_DIRECTIVE_* value: DEFAULT
                               * (unbound), FAST (hot), SLOW (cold) or TIER0 + n */
} strata_object_t;

/* ---- the agent: transactional migration, asked for by a daemon ----------------------------
 *
 * A process whose userfaultfd can move pages offers an agent in its hello
 * ({"op":"hello","pid":N,"agent":true}); a daemon that wants one answers {"agent":true} on the
 * same connection and keeps it: from then on it sends requests on it and the agent thread in
 * the process (libstrata/agent/) answers each with a reply. Both are fixed layouts, in the
 * machine's byte order: a request is the struct followed by `count` page addresses (uint64_t),
 * a reply the struct followed by `count` statuses (int32_t, as move_pages(2) gives them: the
 * node the page is on, or minus an errno: -EAGAIN aborted every attempt (written while being
 * copied), -EBUSY pinned or shared, -ENOENT not there, -ENOMEM no room on the node).
 * A SAMPLE request's addresses are the pages to sample until the next one; its reply is
 * followed by `count` uint64_t: the pages touched since the last SAMPLE, each page address
 * with bit 0 set when the touch was a write (libstrata/agent/sample.c). */
#define STRATA_AGENT_MAGIC 0x54474153u /* "SAGT" */
#define STRATA_AGENT_MAX_PAGES 512
/* At most this many copies a page per MOVE (more are taken as this many): a page written all
 * the time would otherwise hold the agent, and the daemon's round waiting for its reply. */
#define STRATA_AGENT_MAX_ATTEMPTS 64

enum {
  STRATA_AGENT_MOVE = 1,         /* move the pages to `node`, transactionally */
  STRATA_AGENT_DROP_SHADOWS = 2, /* drop shadow copies, `count` of them (0: all); no addresses */
  STRATA_AGENT_SAMPLE = 3,       /* end the samples out, report the touched ones, sample these */
};

typedef struct strata_agent_request_s {
  uint32_t magic;    /* STRATA_AGENT_MAGIC */
  uint32_t op;       /* STRATA_AGENT_* */
  int32_t node;      /* MOVE: the target node */
  uint32_t count;    /* addresses that follow (MOVE), or shadows to drop */
  uint32_t attempts; /* MOVE: copies tried before a page is given up for this request (1 to
                      * STRATA_AGENT_MAX_ATTEMPTS; 0 is 1) */
  uint32_t flags;    /* STRATA_AGENT_FORCE: move pages already on `node` too (tests and
                      * benchmarks on machines of one node) */
} strata_agent_request_t;

#define STRATA_AGENT_FORCE 1u

/* The agent's counters since it started (every reply carries them). */
typedef struct strata_agent_counters_s {
  uint64_t commits;          /* pages moved by a copy that committed */
  uint64_t aborts;           /* copies abandoned: the page was written while being copied */
  uint64_t shadow_demotions; /* demotions by remapping a valid shadow: no copy */
  uint64_t shadows_stale;    /* shadows found written over at demotion, dropped */
  uint64_t shadows_dropped;  /* shadows dropped on request (reclaimed) */
  uint64_t shadows;          /* shadow copies held now */
  uint64_t fallbacks;        /* pages moved by move_pages(2) instead (not Strata's memory) */
  uint64_t samples;          /* pages sampled (SAMPLE) */
  uint64_t samples_touched;  /* samples the program touched before the next SAMPLE */
} strata_agent_counters_t;

typedef struct strata_agent_reply_s {
  uint32_t magic; /* STRATA_AGENT_MAGIC */
  uint32_t count; /* statuses that follow (MOVE), shadows dropped, or touched pages (SAMPLE) */
  strata_agent_counters_t counters;
} strata_agent_reply_t;

#endif /* STRATA_CHANNEL_H */
