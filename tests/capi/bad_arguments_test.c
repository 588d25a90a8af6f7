/* Every C API entry point fed bad arguments: null handles and pointers, bad ids, an empty
 * prompt, missing paths, malformed options. Each must return its error code and a message,
 * never crash. Compiled as C against libmolt.so. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "molt/molt.h"

static int failures = 0;

static void expect_status(const char* what, molt_status got, molt_status want, const char* needle) {
  const char* msg = molt_last_error();
  if (got != want) {
    fprintf(stderr, "FAIL %s: status %d (%s), want %d (%s); message: %s\n", what, (int)got,
            molt_status_name(got), (int)want, molt_status_name(want), msg);
    ++failures;
    return;
  }
  if (want != MOLT_OK && (msg == NULL || msg[0] == '\0')) {
    fprintf(stderr, "FAIL %s: no error message\n", what);
    ++failures;
    return;
  }
  if (needle != NULL && strstr(msg, needle) == NULL) {
    fprintf(stderr, "FAIL %s: message '%s' lacks '%s'\n", what, msg, needle);
    ++failures;
  }
}

static void expect(const char* what, int ok) {
  if (!ok) {
    fprintf(stderr, "FAIL %s\n", what);
    ++failures;
  }
}

#define CHECK(call, want, needle) expect_status(#call, (call), (want), (needle))

static void ladders(void) {
  molt_ladder* l = (molt_ladder*)&failures; /* must be reset to NULL on failure */
  CHECK(molt_ladder_open(NULL, &l), MOLT_ERR_INVALID_ARGUMENT, "no path");
  expect("open(NULL) leaves a NULL handle", l == NULL);
  CHECK(molt_ladder_open("", &l), MOLT_ERR_INVALID_ARGUMENT, "no path");
  CHECK(molt_ladder_open("x", NULL), MOLT_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK(molt_ladder_open("/nonexistent/ladder", &l), MOLT_ERR_NOT_FOUND, "/nonexistent/ladder");
  CHECK(molt_ladder_open(MOLT_SOURCE_DIR "/traces", &l), MOLT_ERR_NOT_FOUND, "ladder.json");
  CHECK(molt_ladder_open(MOLT_SOURCE_DIR "/traces/spike_mid_answer.json", &l), MOLT_ERR_LOAD, NULL);
  expect("a failed open leaves a NULL handle", l == NULL);
  molt_ladder_free(NULL);
  expect("rung_count(NULL) is 0", molt_ladder_rung_count(NULL) == 0);
  expect("rung_name(NULL) is NULL", molt_ladder_rung_name(NULL, 0) == NULL);
  CHECK(molt_ladder_set_budget_source(NULL, "none"), MOLT_ERR_INVALID_ARGUMENT, "ladder is NULL");
  CHECK(molt_set_budget_mib(NULL, 10), MOLT_ERR_INVALID_ARGUMENT, "ladder is NULL");
  CHECK(molt_ladder_release_unused(NULL, NULL), MOLT_ERR_INVALID_ARGUMENT, "ladder is NULL");
}

static void with_ladder(molt_ladder* l) {
  expect("four rungs", molt_ladder_rung_count(l) == 4);
  expect("rung 0 is l", strcmp(molt_ladder_rung_name(l, 0), "l") == 0);
  expect("rung 9 is NULL", molt_ladder_rung_name(l, 9) == NULL);
  expect("rung -1 is NULL", molt_ladder_rung_name(l, -1) == NULL);
  expect("...with a message", strstr(molt_last_error(), "no rung -1") != NULL);

  CHECK(molt_ladder_set_budget_source(l, NULL), MOLT_ERR_INVALID_ARGUMENT, "spec is NULL");
  CHECK(molt_ladder_set_budget_source(l, "yolo"), MOLT_ERR_INVALID_ARGUMENT, "budget 'yolo'");
  CHECK(molt_ladder_set_budget_source(l, "fixed:-1"), MOLT_ERR_INVALID_ARGUMENT, "'-1'");
  CHECK(molt_ladder_set_budget_source(l, "trace:/nonexistent/t.json"), MOLT_ERR_NOT_FOUND,
        "/nonexistent/t.json");
  CHECK(molt_ladder_set_budget_source(l, "trace:" MOLT_SOURCE_DIR "/README.md"), MOLT_ERR_LOAD,
        "README.md");
  CHECK(molt_ladder_set_budget_source(l, "fixed:512"), MOLT_OK, NULL);
  CHECK(molt_set_budget_mib(l, -1), MOLT_ERR_INVALID_ARGUMENT, "-1");
  CHECK(molt_set_budget_mib(l, NAN), MOLT_ERR_INVALID_ARGUMENT, "nan");
  CHECK(molt_set_budget_mib(l, INFINITY), MOLT_OK, NULL);
  CHECK(molt_ladder_release_unused(l, NULL), MOLT_OK, NULL);

  molt_generation* g = (molt_generation*)&failures;
  molt_options o = molt_default_options();
  CHECK(molt_generation_start_prompt(NULL, "hi", NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "ladder is NULL");
  expect("a failed start leaves a NULL handle", g == NULL);
  CHECK(molt_generation_start_prompt(l, "hi", NULL, NULL), MOLT_ERR_INVALID_ARGUMENT,
        "out is NULL");
  CHECK(molt_generation_start_prompt(l, NULL, NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "prompt is NULL");
  CHECK(molt_generation_start_prompt(l, "", NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "the prompt is empty");

  const int32_t ids[] = {1, 2, 1 << 30};
  CHECK(molt_generation_start_ids(l, NULL, 3, NULL, &g), MOLT_ERR_INVALID_ARGUMENT, "ids is NULL");
  CHECK(molt_generation_start_ids(l, ids, 0, NULL, &g), MOLT_ERR_INVALID_ARGUMENT, "no token ids");
  CHECK(molt_generation_start_ids(l, ids, 3, NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "outside the ladder's vocabulary");

  molt_message m[2] = {{"user", "hi"}, {NULL, "x"}};
  CHECK(molt_generation_start_chat(l, NULL, 1, NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "messages is NULL");
  CHECK(molt_generation_start_chat(l, m, 0, NULL, &g), MOLT_ERR_INVALID_ARGUMENT, "no messages");
  CHECK(molt_generation_start_chat(l, m, 2, NULL, &g), MOLT_ERR_INVALID_ARGUMENT,
        "messages[1].role is NULL");
  m[1].role = "robot";
  CHECK(molt_generation_start_chat(l, m, 2, NULL, &g), MOLT_ERR_INVALID_ARGUMENT, "robot");

  o.json = "{not json";
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "not valid JSON");
  o.json = "{\"max_tokns\": 3}";
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "unknown key 'max_tokns'");
  o.json = "{\"sampling\": {\"top_p\": \"high\"}}";
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "sampling.top_p");
  o.json = "[]";
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "expected a JSON object");
  o = molt_default_options();
  o.max_tokens = 0;
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "max_tokens");
  o = molt_default_options();
  o.top_p = 0;
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "top_p");
  o = molt_default_options();
  o.temperature = -1;
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "temperature");
  o = molt_default_options();
  o.policy = (molt_policy)42;
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "42");
  o = molt_default_options();
  o.threads = -2;
  CHECK(molt_generation_start_prompt(l, "hi", &o, &g), MOLT_ERR_OPTIONS, "threads");

  molt_event e;
  CHECK(molt_step(NULL, &e), MOLT_ERR_INVALID_ARGUMENT, "generation is NULL");
  CHECK(molt_cancel(NULL), MOLT_ERR_INVALID_ARGUMENT, "generation is NULL");
  expect("rung(NULL) is \"\"", strcmp(molt_generation_rung(NULL), "") == 0);
  molt_generation_free(NULL);

  /* A good generation: a bad out pointer, then cancelled after its first token. */
  o = molt_default_options();
  o.max_tokens = 8;
  o.threads = 1;
  CHECK(molt_generation_start_prompt(l, "the quick brown fox", &o, &g), MOLT_OK, NULL);
  CHECK(molt_step(g, NULL), MOLT_ERR_INVALID_ARGUMENT, "out is NULL");
  int tokens = 0, done = 0;
  for (int i = 0; i < 100 && !done; ++i) {
    CHECK(molt_step(g, &e), MOLT_OK, NULL);
    if (e.kind == MOLT_EVENT_TOKEN && ++tokens == 1) CHECK(molt_cancel(g), MOLT_OK, NULL);
    done = e.kind == MOLT_EVENT_DONE;
  }
  expect("cancelled after one token", done && tokens == 1 && e.done.tokens == 1);
  expect("reason cancelled", done && strcmp(e.done.reason, "cancelled") == 0);
  CHECK(molt_step(g, &e), MOLT_OK, NULL);
  expect("done stays done", e.kind == MOLT_EVENT_DONE);
  molt_ladder_free(l); /* the generation keeps the ladder alive */
  CHECK(molt_step(g, &e), MOLT_OK, NULL);
  expect("still done after the ladder handle is freed", e.kind == MOLT_EVENT_DONE);
  molt_generation_free(g);
}

int main(void) {
  for (int s = 0; s <= 7; ++s) expect("a status name", molt_status_name((molt_status)s)[0] != '\0');
  expect("an unknown status has a name", molt_status_name((molt_status)99) != NULL);
  expect("a version", strcmp(molt_version(), "") != 0);
  ladders();
  molt_ladder* l = NULL;
  CHECK(molt_ladder_open(MOLT_SOURCE_DIR "/models/tiny-ladder/ladder.json", &l), MOLT_OK, NULL);
  if (l != NULL) with_ladder(l);
  /* A single model directory is a one-rung ladder. */
  CHECK(molt_ladder_open(MOLT_SOURCE_DIR "/models/tiny-ladder/s", &l), MOLT_OK, NULL);
  expect("one rung", molt_ladder_rung_count(l) == 1);
  molt_ladder_free(l);
  if (failures == 0) printf("capi bad arguments: all passed\n");
  return failures == 0 ? 0 : 1;
}
