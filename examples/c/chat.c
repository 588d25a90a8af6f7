/* chat: streams one answer from a molt ladder, each token tagged with the rung that produced
 * it, migrations on their own lines; an optional pressure trace moves the budget mid-answer.
 *
 *   chat --ladder models/tiny-ladder/ladder.json --prompt "Tell me about initrd" \
 *        --trace traces/spike_mid_answer.json --max-tokens 48 --ignore-eos
 *
 * --raw sends the prompt as plain text instead of a chat turn; --events prints one line per
 * event (token index, rung, id; migrations; done) for scripts and tests. */
#include <molt/molt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s --ladder PATH --prompt TEXT [--trace FILE] [--max-tokens N] [--raw]\n"
          "          [--ignore-eos] [--events]\n",
          argv0);
  return 2;
}

static int fail(const char* what, molt_status s) {
  fprintf(stderr, "chat: %s: %s (%s)\n", what, molt_last_error(), molt_status_name(s));
  return 1;
}

int main(int argc, char** argv) {
  const char *ladder_path = NULL, *prompt = NULL, *trace = NULL;
  int raw = 0, events = 0;
  molt_options o = molt_default_options();
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const int has_value = i + 1 < argc;
    if (strcmp(a, "--ladder") == 0 && has_value) {
      ladder_path = argv[++i];
    } else if (strcmp(a, "--prompt") == 0 && has_value) {
      prompt = argv[++i];
    } else if (strcmp(a, "--trace") == 0 && has_value) {
      trace = argv[++i];
    } else if (strcmp(a, "--max-tokens") == 0 && has_value) {
      o.max_tokens = atoi(argv[++i]);
    } else if (strcmp(a, "--raw") == 0) {
      raw = 1;
    } else if (strcmp(a, "--ignore-eos") == 0) {
      o.stop_at_eos = 0;
    } else if (strcmp(a, "--events") == 0) {
      events = 1;
    } else {
      return usage(argv[0]);
    }
  }
  if (ladder_path == NULL || prompt == NULL) return usage(argv[0]);

  molt_ladder* ladder = NULL;
  molt_status s = molt_ladder_open(ladder_path, &ladder);
  if (s != MOLT_OK) return fail("open", s);
  if (trace != NULL) {
    char spec[4096];
    snprintf(spec, sizeof spec, "trace:%s", trace);
    s = molt_ladder_set_budget_source(ladder, spec);
    if (s != MOLT_OK) {
      molt_ladder_free(ladder);
      return fail("budget", s);
    }
  }
  molt_generation* g = NULL;
  const molt_message turn = {"user", prompt};
  s = raw ? molt_generation_start_prompt(ladder, prompt, &o, &g)
          : molt_generation_start_chat(ladder, &turn, 1, &o, &g);
  if (s != MOLT_OK) {
    molt_ladder_free(ladder);
    return fail("start", s);
  }

  const char* last_rung = "";
  const char* nl = ""; /* "\n" while a line of tokens is open */
  molt_event e;
  int rc = 0;
  for (;;) {
    s = molt_step(g, &e);
    if (s != MOLT_OK) {
      rc = fail("step", s);
      break;
    }
    if (e.kind == MOLT_EVENT_TOKEN) {
      if (events) {
        printf("token %lld %s %d\n", (long long)e.token.index, e.token.rung, e.token.id);
      } else {
        if (strcmp(e.token.rung, last_rung) != 0) printf("%s[%s] ", nl, e.token.rung);
        fputs(e.token.text, stdout);
        nl = "\n";
      }
      last_rung = molt_generation_rung(g); /* the event's own strings last until the next step */
    } else if (e.kind == MOLT_EVENT_MIGRATION) {
      if (events) {
        printf("migration %s %s %s %.1f\n", e.migration.from, e.migration.to, e.migration.policy,
               e.migration.ms);
      } else {
        printf("%s  \u21c6 %s \u2192 %s (%s, %.1f ms)\n", nl, e.migration.from, e.migration.to,
               e.migration.policy, e.migration.ms);
        nl = "";
        last_rung = "";
      }
    } else if (e.kind == MOLT_EVENT_PARK) {
      printf(events ? "park %.1f\n" : "\n  parked: budget %.1f MiB\n", e.park.budget_mib);
      nl = "";
      last_rung = "";
    } else if (e.kind == MOLT_EVENT_DONE) {
      if (events) {
        printf("done %lld %lld %s %s\n", (long long)e.done.tokens, (long long)e.done.migrations,
               e.done.rungs_used, e.done.reason);
      } else {
        printf("%s%sdone: %lld tokens, %lld migrations, rungs %s (%s)\n", e.done.tail, nl,
               (long long)e.done.tokens, (long long)e.done.migrations, e.done.rungs_used,
               e.done.reason);
      }
      break;
    }
    fflush(stdout);
  }
  molt_generation_free(g);
  molt_ladder_free(ladder);
  return rc;
}
