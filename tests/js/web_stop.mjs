// The web chat as a phone user sees it (420 px wide) in headless Chromium: a system prompt, a reply
// stopped mid-stream with the Stop button (the server must cancel the generation and free its queue),
// then New chat, then a second reply. Usage: node web_stop.mjs BASE_URL SCREENSHOT.png
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [baseURL, screenshot] = process.argv.slice(2);
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "ferry-chromium-"));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 420, height: 800 },
});
function fail(msg) { console.error("check failed: " + msg); process.exitCode = 1; }
async function metric(name) {
  const text = await (await fetch(new URL("/metrics", baseURL))).text();
  const m = text.match(new RegExp("^" + name + " ([0-9.e+-]+)$", "m"));
  return m ? Number(m[1]) : NaN;
}
async function until(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (await cond()) return true; await new Promise((r) => setTimeout(r, 50)); }
  fail(what);
  return false;
}
try {
  const page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(baseURL, { waitUntil: "domcontentloaded" });
  await page.waitForFunction(() => document.getElementById("status").textContent === "live", null, { timeout: 10000 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  if (overflow > 420) fail(`the page is ${overflow} px wide at a 420 px viewport`);
  for (const id of ["#input", "#send", "#stop", "#new_chat", "#system"])
    if (!(await page.isVisible(id))) fail(id + " is not visible at 420 px");

  const cancelledBefore = await metric("ferry_generations_cancelled_total");
  await page.fill("#system", "You are terse.");
  await page.fill("#max_tokens", "3000");
  await page.fill("#temperature", "0");
  await page.fill("#input", "Tell me a very long story.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => (document.querySelector(".msg.assistant .content")?.textContent.length ?? 0) > 3,
                             null, { timeout: 30000 });
  await page.click("#stop", { timeout: 5000 }).catch(async (e) =>
    fail("Stop could not be clicked (" + String(e).split("\n")[0] + "); the reply: " +
         await page.textContent(".msg.assistant .meta")));
  const meta1 = await page.textContent(".msg.assistant .meta");
  await page.waitForSelector(".msg.assistant.stopped", { timeout: 10000 }).catch(async () =>
    fail("the reply was not stopped: " + await page.textContent(".msg.assistant .meta") + " (at the click: " + meta1 + ")"));
  await until(async () => (await metric("ferry_engine_busy")) === 0 && (await metric("ferry_queue_depth")) === 0, 5000,
              "the engine stayed busy after Stop");
  const cancelled = await metric("ferry_generations_cancelled_total");
  if (!(cancelled > cancelledBefore)) fail(`no generation was cancelled (${cancelledBefore} -> ${cancelled})`);
  const stoppedTokens = await metric("ferry_generated_tokens_total");
  if (!(stoppedTokens < 400)) fail("the stopped reply ran on: " + stoppedTokens + " tokens (unstopped: 441)");

  await page.click("#new_chat");
  if ((await page.$$(".msg")).length !== 0) fail("New chat left messages on the page");
  await page.fill("#max_tokens", "8");
  await page.fill("#input", "Hello again.");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant.done", { timeout: 30000 });
  const meta = await page.textContent(".msg.assistant .meta");
  if (!/tokens/.test(meta)) fail("the second reply did not complete: " + meta);
  if (errors.length) fail("page errors: " + errors.join("; "));
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ overflow, cancelled, stoppedTokens, meta }));
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
