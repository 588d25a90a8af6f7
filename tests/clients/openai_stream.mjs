// The official OpenAI client against `molt serve` (started by run_with_server.sh; base URL in MOLT_URL).
//
// Streams a chat completion on the ladder's top rung, squeezes the budget to the rung below after the
// third token (POST /v1/molt/budget {"rung": …}) and checks the stream: no error, one chunk per token
// with contiguous molt.index from 0 and the rung that produced it, exactly one migration chunk (top →
// the rung below), a final chunk with finish_reason and molt.done.killed === false, usage, and the
// client's own accumulated message equal to the concatenated deltas. Then one non-streamed answer.
// Exit 0 on success; 1 with a message naming what broke otherwise.
import OpenAI from "openai";

const base = (process.env.MOLT_URL || "").replace(/\/+$/, "");
const apiKey = process.env.MOLT_API_KEY || "molt-test-no-key";
const MAX_TOKENS = 120;
const PROMPT = "The driver will be able to use the driver to do it";

class Failure extends Error {}
function check(ok, what, detail) {
  if (!ok) throw new Failure(what + (detail === undefined ? "" : ": " + (typeof detail === "string" ? detail : JSON.stringify(detail))));
}

async function molt(path, body) {
  const res = await fetch(base + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "Authorization": "Bearer " + apiKey, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  check(res.ok, `${body === undefined ? "GET" : "POST"} ${path} ${JSON.stringify(body ?? "")} answered ${res.status}`, text);
  return JSON.parse(text);
}

async function main() {
  check(base, "MOLT_URL is not set (run through run_with_server.sh)");
  const models = await molt("/v1/models");
  const ladder = (models.data || []).find((m) => m.molt && Array.isArray(m.molt.rungs));
  check(ladder, "/v1/models lists no ladder (an entry with molt.rungs)", models);
  const rungs = ladder.molt.rungs.map((r) => r.name);
  check(rungs.length >= 2, "the ladder needs at least two rungs", rungs);
  const [top, below] = rungs;
  console.log(`ladder ${ladder.id}: rungs ${rungs.join(", ")}; will squeeze ${top} → ${below}`);
  await molt("/v1/molt/budget", { mib: null });

  const client = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0, timeout: 60000 });

  // ── streamed, with the budget cut after the third token ──
  const stream = client.beta.chat.completions.stream({
    model: ladder.id,
    messages: [{ role: "user", content: PROMPT }],
    max_tokens: MAX_TOKENS,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ignore_eos: true, // the tiny ladder's chat answers are short; the cut must fall mid-answer
  });
  const chunks = [];
  let tokens = 0, text = "", squeezed = null, first = true;
  for await (const chunk of stream) {
    chunks.push(chunk);
    check(chunk.object === "chat.completion.chunk", `chunk ${chunks.length - 1} object`, chunk);
    check(typeof chunk.id === "string" && chunk.id.startsWith("chatcmpl-"), `chunk ${chunks.length - 1} id`, chunk);
    const choice = (chunk.choices || [])[0];
    if (first && choice) {
      check(choice.delta && choice.delta.role === "assistant", "the first chunk's delta has role assistant", chunk);
      first = false;
    }
    const m = chunk.molt || {};
    if (m.index !== undefined) {
      check(choice && typeof choice.delta.content === "string", `token chunk ${m.index} has delta.content`, chunk);
      check(m.index === tokens, `token chunk indices are contiguous from 0 (expected ${tokens}, got ${m.index})`, chunk);
      check(typeof m.rung === "string" && rungs.includes(m.rung), `token ${m.index} names its rung`, chunk);
      text += choice.delta.content;
      tokens++;
      if (tokens === 3 && squeezed === null) {
        squeezed = await molt("/v1/molt/budget", { rung: below });
        console.log(`after token 2: squeezed to ${below}: ${JSON.stringify(squeezed)}`);
        check(typeof squeezed.budget_mib === "number", "squeeze reply budget_mib is a number", squeezed);
      }
    } else if (choice) {
      check(!choice.delta || !choice.delta.content, "a chunk with content but without molt.index", chunk);
    }
  }
  const final = await stream.finalChatCompletion();
  check(squeezed !== null, `the answer ended after ${tokens} token(s), before the budget could be cut`);

  const migrations = chunks.filter((c) => c.molt && c.molt.migration);
  check(migrations.length === 1, `exactly one migration chunk (got ${migrations.length})`, migrations.map((c) => c.molt));
  const mig = migrations[0].molt.migration;
  check(mig.from === top && mig.to === below, `the migration is ${top} → ${below}`, mig);
  check(migrations[0].molt.rung === below, "the migration chunk's molt.rung is the rung it moved to", migrations[0].molt);
  check((migrations[0].choices || []).every((c) => !c.delta || !c.delta.content), "the migration chunk carries no content", migrations[0]);
  // every token before the migration chunk on the top rung, every one after on the rung below
  let rung = top;
  for (const c of chunks) {
    if (c.molt && c.molt.migration) rung = c.molt.migration.to;
    else if (c.molt && c.molt.index !== undefined) check(c.molt.rung === rung, `token ${c.molt.index} on ${rung}`, c.molt);
  }

  const finishers = chunks.filter((c) => (c.choices || []).some((ch) => ch.finish_reason));
  check(finishers.length === 1, `exactly one chunk with a finish_reason (got ${finishers.length})`);
  const fin = finishers[0];
  check(["stop", "length"].includes(fin.choices[0].finish_reason), "finish_reason is stop or length", fin);
  check(fin.molt && fin.molt.done, "the finishing chunk has molt.done", fin);
  const done = fin.molt.done;
  check(done.killed === false, "molt.done.killed === false", done);
  check(done.tokens === tokens, `molt.done.tokens (${done.tokens}) = token chunks (${tokens})`, done);
  check(Array.isArray(done.rungs_used) && done.rungs_used.includes(top) && done.rungs_used.includes(below),
    `molt.done.rungs_used has ${top} and ${below}`, done);
  check(done.migrations === 1, "molt.done.migrations === 1", done);
  check(chunks.indexOf(fin) > chunks.indexOf(migrations[0]), "the finishing chunk follows the migration");
  const usageChunk = chunks[chunks.length - 1];
  check(Array.isArray(usageChunk.choices) && usageChunk.choices.length === 0 && usageChunk.usage,
    "the last chunk (include_usage) has choices [] and usage", usageChunk);
  check(usageChunk.usage.completion_tokens === tokens, `usage.completion_tokens = ${tokens}`, usageChunk.usage);
  check(usageChunk.usage.total_tokens === usageChunk.usage.prompt_tokens + usageChunk.usage.completion_tokens,
    "usage.total_tokens = prompt + completion", usageChunk.usage);

  const accumulated = final.choices[0].message.content;
  check(accumulated === text, "the client's accumulated message equals the concatenated deltas",
    { accumulated, concatenated: text });
  check(text.length > 0, "the streamed answer is not empty");
  console.log(`streamed: ${tokens} tokens, ${mig.from} → ${mig.to} at token ${mig.at_token} (${mig.policy}, ${mig.ms} ms), ` +
    `finish ${fin.choices[0].finish_reason}: ${JSON.stringify(text.slice(0, 80))}…`);

  // ── not streamed, with no budget ──
  await molt("/v1/molt/budget", { mib: null });
  const whole = await client.chat.completions.create({
    model: ladder.id,
    messages: [{ role: "user", content: PROMPT }],
    max_tokens: 32,
    temperature: 0,
  });
  check(whole.object === "chat.completion", "non-streamed object", whole);
  const content = whole.choices && whole.choices[0] && whole.choices[0].message && whole.choices[0].message.content;
  check(typeof content === "string" && content.length > 0, "non-streamed choices[0].message.content is not empty", whole);
  check(whole.choices[0].finish_reason, "non-streamed finish_reason", whole);
  check(whole.molt && Array.isArray(whole.molt.rungs) && whole.molt.done, "non-streamed molt {rungs, done}", whole.molt);
  check(whole.molt.done.killed === false, "non-streamed molt.done.killed === false", whole.molt.done);
  check(whole.usage && whole.molt.rungs.length === whole.usage.completion_tokens,
    "non-streamed molt.rungs has one rung per completion token", { rungs: whole.molt.rungs.length, usage: whole.usage });
  console.log(`non-streamed: ${whole.usage.completion_tokens} tokens on ${[...new Set(whole.molt.rungs)].join(", ")}`);
  console.log("openai_stream: ok");
}

main().then(() => process.exit(0), async (e) => {
  console.error("openai_stream: FAIL: " + (e instanceof Failure ? e.message : (e && e.stack) || e));
  try { await molt("/v1/molt/budget", { mib: null }); } catch (_) { /* best effort */ }
  process.exit(1);
});
