// The classic Notebook in gateway mode, its kernels kiln's, driven in a real headless
// Chromium: open a notebook, run its cells, see the DataFrame's table and the figure.
// The Go test in test/jupyter starts the Notebook server (Debian's jupyter-notebook,
// --gateway-url at kiln) and runs this with NOTEBOOK_URL and CHROMIUM set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import puppeteer from 'puppeteer-core';

const notebookURL = process.env.NOTEBOOK_URL;
assert.ok(notebookURL, 'NOTEBOOK_URL must be set');

test('a notebook runs in kiln and shows its table and its figure', async (t) => {
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || 'chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  t.after(() => browser.close());
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(notebookURL + '/notebooks/kiln.ipynb', { waitUntil: 'domcontentloaded' });
  // The page's kernel is started through the gateway: kiln's.
  await page.waitForFunction(
    () => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel && Jupyter.notebook.kernel.is_connected(),
    { timeout: 90_000 });
  await page.evaluate(() => Jupyter.notebook.execute_all_cells());
  const table = await page.waitForSelector('.output_area table.dataframe', { timeout: 120_000 });
  const text = await table.evaluate((el) => el.innerText);
  assert.match(text, /north/);
  assert.match(text, /south/);
  const img = await page.waitForSelector('.output_area img[src^="data:image/png"]', { timeout: 120_000 });
  const size = await img.evaluate((el) => [el.naturalWidth, el.naturalHeight]);
  assert.ok(size[0] > 100 && size[1] > 100, `the figure is ${size}`);
  const stdout = await page.$eval('.output_area .output_stdout', (el) => el.innerText);
  assert.match(stdout, /rows 300/);
  const kernelName = await page.evaluate(() => Jupyter.notebook.kernel.name);
  assert.equal(kernelName, 'python3');
  assert.deepEqual(errors, []);
});
