// Open a page in headless Chromium with every request off this machine refused, wait for
// a bertviz view to draw, and print what happened as JSON.
// Usage: node tests/browser/render.mjs URL [TIMEOUT_MS]   (CHROMIUM overrides /usr/bin/chromium)
import { chromium } from "playwright-core";

const url = process.argv[2];
const timeout = Number(process.argv[3] || 90000);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"],
});
const page = await browser.newPage();
const blocked = [];
const pageErrors = [];
page.on("pageerror", (error) => pageErrors.push(String(error)));
await page.route("**/*", (route) => {
  const address = route.request().url();
  if (/^(file:|data:|blob:|http:\/\/127\.0\.0\.1[:/])/.test(address)) return route.continue();
  blocked.push(address);
  return route.abort();
});
const result = { drawn: 0, blocked, pageErrors, error: null, fallbackHidden: null };
try {
  await page.goto(url);
  await page.waitForFunction(() => {
    const svg = document.querySelector('[id^="bertviz-"] svg');
    return svg && svg.querySelectorAll("rect, line, text").length > 0;
  }, null, { timeout, polling: 250 });
  result.drawn = await page.evaluate(
    () => document.querySelector('[id^="bertviz-"] svg').querySelectorAll("rect, line, text").length);
  await page.waitForTimeout(500);
  result.fallbackHidden = await page.evaluate(() => {
    const fallback = document.querySelector('[id^="course-attention-"] .fallback');
    return fallback ? getComputedStyle(fallback).display === "none" : null;
  });
} catch (error) {
  result.error = String(error).split("\n")[0];
}
console.log(JSON.stringify(result));
await browser.close();
