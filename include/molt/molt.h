/* molt: an on-device LLM runtime that keeps answering while the memory budget moves, by
 * switching between the rungs of a ladder of models mid-answer. This is its C API (C99).
 *
 *   molt_ladder* ladder = NULL;
 *   if (molt_ladder_open("models/tiny-ladder/ladder.json", &ladder) != MOLT_OK) {
 *     fprintf(stderr, "%s\n", molt_last_error());
 *     return 1;
 *   }
 *   molt_ladder_set_budget_source(ladder, "trace:traces/spike_mid_answer.json");
 *   molt_options o = molt_default_options();
 *   molt_message m = {"user", "Why is the sky blue?"};
 *   molt_generation* g = NULL;
 *   molt_generation_start_chat(ladder, &m, 1, &o, &g);
 *   molt_event e;
 *   while (molt_step(g, &e) == MOLT_OK && e.kind != MOLT_EVENT_DONE) {
 *     if (e.kind == MOLT_EVENT_TOKEN) printf("[%s] %s\n", e.token.rung, e.token.text);
 *   }
 *   molt_generation_free(g);
 *   molt_ladder_free(ladder);
 *
 * Link with `pkg-config --cflags --libs molt`, or in CMake `find_package(molt)` and
 * `target_link_libraries(app PRIVATE molt::molt)`.
 *
 * Errors. Every function that can fail returns a molt_status; MOLT_OK is 0. The message of the
 * last failing call on the calling thread is molt_last_error(). No function throws, aborts on
 * bad input, or keeps a pointer the caller passed in after it returns (strings are copied).
 * Output pointers are left untouched on failure, except that handles are set to NULL.
 *
 * Threading. A ladder and the generations started on it are driven from one thread at a time
 * (call it the stepping thread): open, free, start, step, release and set_budget_source must not
 * run concurrently on the same ladder or its generations. Several generations on one ladder may
 * be interleaved, step by step, on that thread; they share the rungs' weights. Two exceptions
 * may be called from any thread while the handle is alive: molt_set_budget_mib (an app's memory
 * warning) and molt_cancel. Separate ladders are independent. molt_last_error is per thread.
 * Kernel threads (molt_options.threads) are a process-wide setting.
 *
 * Lifetime. A generation keeps its ladder alive: molt_ladder_free only drops the caller's
 * handle, and the ladder goes when its last generation is freed. Strings in a molt_event are
 * owned by the generation and valid until the next molt_step or molt_generation_free on it.
 */
#ifndef MOLT_MOLT_H
#define MOLT_MOLT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MOLT_API __attribute__((visibility("default")))
#else
#define MOLT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct molt_ladder molt_ladder;
typedef struct molt_generation molt_generation;

typedef enum molt_status {
  MOLT_OK = 0,
  MOLT_ERR_INVALID_ARGUMENT = 1, /* a null handle or pointer, a bad id, an empty prompt */
  MOLT_ERR_NOT_FOUND = 2,        /* a ladder, model directory or trace file that is not there */
  MOLT_ERR_OPTIONS = 3,          /* an option out of range, or options JSON malformed / unknown */
  MOLT_ERR_LOAD = 4,             /* files that exist but cannot be used (corrupt, mismatched) */
  MOLT_ERR_GENERATION = 5,       /* a step failed (e.g. parked for too long, cache full) */
  MOLT_ERR_OUT_OF_MEMORY = 6,
  MOLT_ERR_INTERNAL = 7 /* anything else; the message says what */
} molt_status;

/* A short name of a status ("ok", "invalid argument", ...); never NULL. */
MOLT_API const char* molt_status_name(molt_status status);
/* The message of the last call on this thread that failed ("" when none has). */
MOLT_API const char* molt_last_error(void);
/* "0.1.0" */
MOLT_API const char* molt_version(void);

/* ---- Options ----------------------------------------------------------------------------- */

/* What happens when the budget falls below the current rung (DESIGN.md §1, §3). */
typedef enum molt_policy {
  MOLT_POLICY_HOLD = 0,              /* never switch; killed once over budget past a grace */
  MOLT_POLICY_SMALL = 1,             /* always the smallest rung */
  MOLT_POLICY_REPREFILL = 2,         /* load the receiver beside the sender, re-read the text */
  MOLT_POLICY_RELEASE_REPREFILL = 3, /* free the sender first, then load and re-read */
  MOLT_POLICY_MOLT = 4,              /* carry the KV cache across through a map (the default) */
  MOLT_POLICY_HEAL = 5,              /* molt, then re-prefill natively between decode steps */
  MOLT_POLICY_AUTO = 6               /* chooses per migration */
} molt_policy;

typedef struct molt_options {
  molt_policy policy;
  int32_t max_tokens;    /* answer length limit (> 0) */
  float temperature;     /* 0: greedy */
  float top_p;           /* in (0, 1]; 1: off */
  int32_t top_k;         /* 0: off */
  uint64_t seed;         /* sampling seed */
  int32_t stop_at_eos;   /* non-zero: end at the model's end-of-sequence (and chat's <|im_end|>) */
  int32_t prefill_chunk; /* tokens per prefill call (> 0) */
  int32_t heal_chunk;    /* heal: positions re-prefilled per decode step (> 0) */
  int32_t threads;       /* kernel threads for the whole process; 0: all cores */
  /* Optional (NULL: none): a JSON object of any further options, applied over the fields
   * above, e.g. {"up_margin": 0.2, "poll_ms": 5, "sampling": {"repetition_penalty": 1.1}}.
   * Unknown keys are refused with MOLT_ERR_OPTIONS naming them. */
  const char* json;
} molt_options;

/* The defaults of `molt generate --ladder`: policy molt, 64 tokens, greedy, stop at eos. */
MOLT_API molt_options molt_default_options(void);

/* ---- Ladders ----------------------------------------------------------------------------- */

/* `path`: a ladder manifest (ladder.json), a folder holding one, or a single model directory
 * (config.json + safetensors + tokenizer), which is a one-rung ladder. Reads headers only: the
 * weights load when a generation needs them. The budget starts as "none" (no limit). */
MOLT_API molt_status molt_ladder_open(const char* path, molt_ladder** out);
/* Drops the caller's handle (NULL is ignored); see Lifetime above. */
MOLT_API void molt_ladder_free(molt_ladder* ladder);

/* Rungs, largest first (index 0 is the top rung). */
MOLT_API int32_t molt_ladder_rung_count(const molt_ladder* ladder);
/* The rung's name, owned by the ladder; NULL (and an error message) for a bad index. */
MOLT_API const char* molt_ladder_rung_name(const molt_ladder* ladder, int32_t index);

/* The memory budget every generation on this ladder obeys, checked between every two tokens:
 *   "trace:FILE"  a pressure trace (JSON) replayed against each generation's clock
 *   "live"        this machine's signals (cgroup limits, PSI, MemAvailable)
 *   "fixed:MIB"   a constant budget
 *   "push[:MIB]"  the app's own number, set with molt_set_budget_mib
 *   "none"        no limit
 * Takes effect at the next budget check of every generation on the ladder. */
MOLT_API molt_status molt_ladder_set_budget_source(molt_ladder* ladder, const char* spec);
/* The app's memory warning (iOS didReceiveMemoryWarning, Android onTrimMemory): the budget in
 * MiB from now on (INFINITY: no limit). Switches the ladder to a "push" source if it has
 * another. Safe from any thread. */
MOLT_API molt_status molt_set_budget_mib(molt_ladder* ladder, double mib);
/* Releases the weights of every rung no generation holds (the ladder keeps rungs loaded
 * between generations so that the next one starts warm). `released` (may be NULL) receives
 * how many. */
MOLT_API molt_status molt_ladder_release_unused(molt_ladder* ladder, int32_t* released);

/* ---- Generations ------------------------------------------------------------------------- */

typedef struct molt_message {
  const char* role; /* "system", "user", "assistant" or "tool" */
  const char* content;
} molt_message;

/* Start one generation; nothing runs until the first molt_step. `options` may be NULL
 * (molt_default_options()). Chat messages go through the ChatML template with the assistant
 * turn opened, and the answer also stops at <|im_end|>; a prompt is encoded as plain text;
 * ids are used as given (each inside the ladder's vocabulary). */
MOLT_API molt_status molt_generation_start_chat(molt_ladder* ladder, const molt_message* messages,
                                                size_t n_messages, const molt_options* options,
                                                molt_generation** out);
MOLT_API molt_status molt_generation_start_prompt(molt_ladder* ladder, const char* prompt,
                                                  const molt_options* options,
                                                  molt_generation** out);
MOLT_API molt_status molt_generation_start_ids(molt_ladder* ladder, const int32_t* ids,
                                               size_t n_ids, const molt_options* options,
                                               molt_generation** out);
/* Frees the generation (NULL is ignored); the rungs it used stay loaded for the ladder. */
MOLT_API void molt_generation_free(molt_generation* generation);

typedef enum molt_event_kind {
  MOLT_EVENT_TOKEN = 0,     /* .token */
  MOLT_EVENT_MIGRATION = 1, /* .migration: the generation changed rung */
  MOLT_EVENT_PARK = 2,      /* .park: no rung fits; the weights are released, the cache kept */
  MOLT_EVENT_RESUME = 3,    /* .resume: a rung fits again */
  MOLT_EVENT_HEAL = 4,      /* .heal: healing finished; the cache is native again */
  MOLT_EVENT_BUDGET = 5,    /* .budget: the budget changed */
  MOLT_EVENT_WAITING = 6,   /* parked: step again later (the next step waits up to poll_ms) */
  MOLT_EVENT_DONE = 7       /* .done: finished; every later step returns DONE again */
} molt_event_kind;

typedef struct molt_token_event {
  int64_t index;    /* 0-based position in the answer, contiguous across rung changes */
  const char* text; /* what this token adds (whole UTF-8 characters; may be ""), NUL-ended */
  size_t text_len;
  int32_t id;
  const char* rung; /* the rung that produced it */
} molt_token_event;

typedef struct molt_migration_event {
  const char* from;
  const char* to;
  const char* policy; /* what ran: reprefill, release-reprefill, molt, heal */
  double ms;          /* wall ms from the budget check to the receiver's first logits */
  double flops_saved; /* fraction of the receiver's re-prefill FLOPs not spent */
  double pressure;    /* 1 - budget / top rung's footprint, in [0, 1] */
  double budget_mib;
  int64_t context;  /* positions carried across */
  int64_t at_token; /* index of the first token the receiver produces */
  const char* note; /* why a fallback was taken, or what auto chose; may be "" */
} molt_migration_event;

typedef struct molt_park_event {
  const char* rung; /* "" when nothing was loaded yet */
  double budget_mib;
  double need_mib; /* the smallest rung's footprint */
} molt_park_event;

typedef struct molt_resume_event {
  const char* rung;
  int64_t waited_steps;
  double waited_ms;
} molt_resume_event;

typedef struct molt_heal_event {
  const char* rung;
  int64_t at_token;
  int64_t positions; /* re-prefilled natively */
  int64_t steps;     /* decode steps it was spread over */
  double ms;
} molt_heal_event;

typedef struct molt_budget_event {
  double mib; /* INFINITY: no limit */
} molt_budget_event;

typedef struct molt_done_event {
  int64_t tokens;
  int64_t migrations;
  int64_t parks;
  int32_t killed;         /* hold: over budget past its grace, as the OS would */
  const char* reason;     /* "max_tokens", "eos", "killed", "cancelled" */
  const char* rungs_used; /* comma-separated, in first-use order */
  const char* tail;       /* text the stream decoder held back (an unfinished character) */
  double migration_ms;    /* sum over migrations */
  double peak_mib;        /* accounted peak */
  double elapsed_ms;
} molt_done_event;

/* One event; only the member that `kind` names is filled, the others are zero. */
typedef struct molt_event {
  molt_event_kind kind;
  molt_token_event token;
  molt_migration_event migration;
  molt_park_event park;
  molt_resume_event resume;
  molt_heal_event heal;
  molt_budget_event budget;
  molt_done_event done;
} molt_event;

/* The next event. Events come one per call, in the order they happened (budget, park, resume,
 * heal, migration, token, done); when none is queued the generation advances by one token (the
 * first call prefills the prompt). Never blocks on the budget: parked, it returns WAITING, and
 * the next call first waits up to poll_ms for the budget source (a pushed budget wakes it at
 * once; a token-clocked trace does not wait). */
MOLT_API molt_status molt_step(molt_generation* generation, molt_event* out);
/* Ends the generation at its next step (reason "cancelled"); the answer so far is kept. Safe
 * from any thread. */
MOLT_API molt_status molt_cancel(molt_generation* generation);

/* The rung the generation is on ("" before its first step or while parked without a cache). */
MOLT_API const char* molt_generation_rung(const molt_generation* generation);

#ifdef __cplusplus
}
#endif

#endif /* MOLT_MOLT_H */
