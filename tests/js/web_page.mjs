// Drives ferry-server's web page in headless Chromium (Debian's /usr/bin/chromium through
// playwright-core, no browser download): sends a message, watches the reply stream in, watches the
// dashboard numbers change, saves a screenshot. Usage: node web_page.mjs BASE_URL SCREENSHOT.png
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
  viewport: { width: 1200, height: 720 },
});
function fail(msg) { console.error("check failed: " + msg); process.exitCode = 1; }
try {
  const page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(baseURL, { waitUntil: "domcontentloaded" });
  await page.waitForFunction(() => document.getElementById("status").textContent === "live", null, { timeout: 10000 });
  const tokensBefore = Number(await page.textContent("#m-tokens"));

  // Record every distinct length of the reply while it streams: several lengths = incremental output.
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const c = document.querySelector(".msg.assistant .content");
      if (c) window.__lengths.add(c.textContent.length);
    }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
  });
  await page.fill("#max_tokens", process.argv[4] || "48");
  await page.fill("#temperature", "0");
  await page.fill("#input", "Tell me about ferries.");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant.done", { timeout: 30000 });
  const reply = await page.textContent(".msg.assistant .content");
  const meta = await page.textContent(".msg.assistant .meta");
  const lengths = await page.evaluate(() => window.__lengths.size);
  // Deltas the page rendered one at a time (data-deltas): a starved browser may read every event of a
  // fast reply in one network read and paint once (the MutationObserver then sees 2 lengths), but the
  // page must still have applied the reply as a stream of deltas, not as one body.
  const deltas = Number(await page.getAttribute(".msg.assistant", "data-deltas")) || 0;
  if (!reply || reply.length === 0) fail("no reply text appeared");
  if (deltas < 3) fail(`the reply did not stream (${deltas} deltas rendered, ${lengths} distinct lengths seen)`);
  if (!/tokens/.test(meta)) fail("no usage line under the reply: " + meta);

  // The dashboard is fed every few hundred ms: its token count must move past the reply's tokens.
  await page.waitForFunction((before) => Number(document.getElementById("m-tokens").textContent) > before,
                             tokensBefore, { timeout: 10000 });
  const tokensAfter = Number(await page.textContent("#m-tokens"));
  // The steady rate is published when a generation ends, so it can trail the token count by one
  // snapshot: wait for it rather than read it once (a loaded CI machine showed "0.0 tok/s" here).
  await page.waitForFunction(() => parseFloat(document.getElementById("m-steady-rate").textContent) > 0,
                             null, { timeout: 10000 }).catch(() => {});
  const rate = await page.textContent("#m-steady-rate");
  if (!/^[0-9.]+ tok\/s$/.test(rate) || parseFloat(rate) <= 0) fail("steady rate not shown: " + rate);
  if (errors.length) fail("page errors: " + errors.join("; "));
  await page.screenshot({ path: screenshot });
  console.log(JSON.stringify({ reply, lengths, deltas, tokensBefore, tokensAfter, rate }));
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
