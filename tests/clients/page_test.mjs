// The browser page of `molt serve` in headless Chromium (playwright-core driving Debian's chromium;
// base URL in MOLT_URL, started by run_with_server.sh). Types a prompt, sends it, waits for tokens,
// clicks "squeeze to <second rung>", waits for a .switch marker, checks that the chart took scheduler
// events and drew lines and tenant lanes, and saves a screenshot to $OUT_DIR/page.png. PAGE_FILE=path
// serves that file as / instead of the server's embedded page (to try an edited page without a rebuild).
// Exit 0 on success; 1 with a message otherwise.
import { chromium } from "playwright-core";
import path from "node:path";
import fs from "node:fs";

const base = (process.env.MOLT_URL || "").replace(/\/+$/, "");
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const outDir = process.env.OUT_DIR || ".";
const apiKey = process.env.MOLT_API_KEY || "";
const TIMEOUT = 30000;

class Failure extends Error {}
function check(ok, what) { if (!ok) throw new Failure(what); }

async function main() {
  check(base, "MOLT_URL is not set (run through run_with_server.sh)");
  check(fs.existsSync(executablePath), `no chromium at ${executablePath} (set CHROMIUM)`);
  fs.mkdirSync(outDir, { recursive: true });
  const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--headless=new"] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => { if (m.type() === "error") problems.push("console error: " + m.text() + " " + JSON.stringify(m.location())); });
  page.on("requestfailed", (r) => {
    // the EventSource and the answer's fetch are cut when the page closes; anything else is a problem
    if (!r.url().includes("/v1/molt/events")) problems.push("request failed: " + r.url() + " " + (r.failure() || {}).errorText);
  });
  try {
    // with a key, the page is opened as /?api_key=K (a browser cannot send a Bearer header on navigation);
    // the page keeps the key in localStorage and sends it as Bearer on fetch(), ?api_key= on the EventSource
    const entry = base + "/" + (apiKey ? "?api_key=" + encodeURIComponent(apiKey) : "");
    if (process.env.PAGE_FILE) {   // try a page being edited against a server built with an older one
      const html = fs.readFileSync(process.env.PAGE_FILE);
      await page.route((u) => u.pathname === "/", (route) =>
        route.fulfill({ status: 200, contentType: "text/html; charset=utf-8", body: html }));
    }
    const res = await page.goto(entry, { waitUntil: "load" });
    check(res && res.ok(), `GET / answered ${res && res.status()}`);
    check(/text\/html/.test(res.headers()["content-type"] || ""), `GET / content-type ${res.headers()["content-type"]}`);

    // the legend and the squeeze buttons come from /v1/models
    await page.waitForSelector("#legend [data-rung]", { timeout: TIMEOUT });
    const rungs = await page.$$eval("#legend [data-rung]", (els) => els.map((e) => e.dataset.rung));
    check(rungs.length >= 2, `the legend shows ${rungs.length} rung(s)`);
    const [top, second] = rungs;
    const squeezeButtons = await page.$$eval("#budget-controls button[data-action=squeeze]", (els) => els.map((e) => e.dataset.rung));
    check(JSON.stringify(squeezeButtons) === JSON.stringify(rungs.slice(1)),
      `squeeze buttons ${JSON.stringify(squeezeButtons)} are the rungs below the top ${JSON.stringify(rungs.slice(1))}`);
    check(await page.$("#budget-controls #no-limit") && await page.$("#budget-controls #budget-set") && await page.$("#budget-mib"),
      "the budget controls have 'no limit', a MiB input and 'set'");
    await page.click("#no-limit");
    await page.waitForFunction(() => document.querySelector("#budget-state").textContent.includes("budget"), null, { timeout: TIMEOUT });

    // scheduler events reach the chart
    await page.waitForFunction(() => +document.querySelector("#chart").dataset.rounds >= 1, null, { timeout: TIMEOUT });
    const roundsBefore = +(await page.getAttribute("#chart", "data-rounds"));

    await page.fill("#prompt", "The driver will be able to use the driver to do it");
    await page.fill("#max-tokens", "200");
    await page.click("#send");
    await page.waitForFunction(() => document.querySelectorAll("#answer .tok").length >= 3, null, { timeout: TIMEOUT });
    const firstRungs = await page.$$eval("#answer .tok", (els) => [...new Set(els.map((e) => e.dataset.rung))]);
    check(firstRungs.length === 1 && firstRungs[0] === top, `the first tokens are on ${top} (got ${firstRungs})`);

    await page.click(`#budget-controls button[data-action=squeeze][data-rung="${second}"]`);
    await page.waitForSelector("#answer .switch", { timeout: TIMEOUT });
    const sw = await page.$eval("#answer .switch", (e) => ({ from: e.dataset.from, to: e.dataset.to, text: e.textContent }));
    check(sw.from === top && sw.to === second, `the switch marker reads ${JSON.stringify(sw)} (expected ${top} → ${second})`);

    await page.waitForFunction(() => ["done", "error"].includes(document.querySelector("#answer").dataset.state), null, { timeout: 60000 });
    const answer = await page.$eval("#answer", (e) => ({ state: e.dataset.state, tokens: +e.dataset.tokens }));
    const status = await page.textContent("#status");
    check(answer.state === "done", `the answer ended in state ${answer.state} (status: ${status})`);
    const after = await page.$$eval("#answer .tok", (els) => {
      const sw = document.querySelector("#answer .switch");
      return els.filter((e) => sw.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING).map((e) => e.dataset.rung);
    });
    check(after.length > 0 && after.every((r) => r === second), `tokens after the switch are on ${second} (got ${[...new Set(after)]})`);
    const colours = await page.$$eval("#answer .tok", (els) => new Set(els.map((e) => getComputedStyle(e).color)).size);
    check(colours >= 2, `tokens of the two rungs have distinct colours (${colours} colour(s))`);

    // the chart: more rounds, a budget step line, the accounted line, and a tenant lane with both rungs
    await page.waitForFunction((n) => +document.querySelector("#chart").dataset.rounds > n, roundsBefore, { timeout: TIMEOUT });
    await page.waitForTimeout(700);   // one more idle event and a repaint
    const chart = await page.$eval("#chart", (svg) => ({
      rounds: +svg.dataset.rounds,
      budget: (svg.querySelector("#budget-line") || { getAttribute: () => "" }).getAttribute("d"),
      accounted: (svg.querySelector("#accounted-line") || { getAttribute: () => "" }).getAttribute("points"),
      paths: svg.querySelectorAll("path").length,
      polylines: svg.querySelectorAll("polyline").length,
      laneRungs: [...new Set([...svg.querySelectorAll(".lane rect")].map((r) => r.dataset.rung))],
    }));
    check(chart.rounds > roundsBefore, `chart data-rounds grew (${roundsBefore} → ${chart.rounds})`);
    check(chart.paths + chart.polylines >= 2, `the chart has path/polyline elements (${chart.paths} paths, ${chart.polylines} polylines)`);
    check(chart.budget && /^M[\d.]+,[\d.]+/.test(chart.budget), `the budget step line has points (d="${chart.budget}")`);
    check(chart.accounted && chart.accounted.split(" ").length >= 2, "the accounted line has points");
    check(chart.laneRungs.includes(top) && chart.laneRungs.includes(second),
      `a tenant lane shows ${top} and ${second} (got ${chart.laneRungs})`);

    const shot = path.join(outDir, "page.png");
    await page.$eval("#answer .switch", (e) => e.scrollIntoView({ block: "center" }));   // the seam in view
    await page.screenshot({ path: shot, fullPage: true });
    await page.click("#no-limit");
    await page.waitForTimeout(200);
    check(problems.length === 0, "the page reported problems:\n  " + problems.join("\n  "));
    console.log(`page: ${answer.tokens} tokens, switch "${sw.text}", chart ${chart.rounds} rounds, lanes ${chart.laneRungs}; screenshot ${shot}`);
    console.log("page_test: ok");
  } catch (e) {
    try { await page.screenshot({ path: path.join(outDir, "page-failure.png"), fullPage: true }); } catch (_) { /* ignore */ }
    if (problems.length && !(e instanceof Failure && e.message.startsWith("the page reported"))) e.message += "\n  page problems:\n  " + problems.join("\n  ");
    throw e;
  } finally {
    await browser.close();
  }
}

main().then(() => process.exit(0), (e) => {
  console.error("page_test: FAIL: " + (e instanceof Failure ? e.message : (e && e.stack) || e));
  process.exit(1);
});
