// kiln's MCP server driven by the official TypeScript SDK, over Streamable HTTP and
// over `kiln mcp` (stdio). The Go test in test/mcp starts kiln and runs this with
// node --test, with KILN_URL, KILN_API_KEY and KILN_BIN set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const url = process.env.KILN_URL;
const key = process.env.KILN_API_KEY;
const bin = process.env.KILN_BIN;
assert.ok(url && key && bin, 'KILN_URL, KILN_API_KEY and KILN_BIN must be set');

const transports = {
  http: (k) => new StreamableHTTPClientTransport(new URL(url + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${k}` } },
  }),
  stdio: (k) => new StdioClientTransport({
    command: bin, args: ['mcp', '--url', url],
    env: { PATH: process.env.PATH, KILN_API_KEY: k }, stderr: 'ignore',
  }),
};

async function connect(kind, k = key) {
  const client = new Client({ name: 'kiln-ts-test', version: '1.0.0' });
  await client.connect(transports[kind](k));
  return client;
}

function text(res) {
  return res.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
}

async function execute(client, args, options) {
  return client.callTool({ name: 'execute', arguments: args }, undefined, { timeout: 120_000, ...options });
}

// containerGone polls the Docker daemon until the container is gone.
async function containerGone(id, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const out = execFileSync('docker', ['ps', '-aq', '--no-trunc', '--filter', `id=${id}`]).toString().trim();
    if (out === '') return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

// The sandbox learns its own container id from its mounts (runc).
const printContainerID = `
import re
ids = re.findall(r"/containers/([0-9a-f]{64})/", open("/proc/self/mountinfo").read())
print("container", ids[0] if ids else "unknown", flush=True)
`;

for (const kind of Object.keys(transports)) {
  test(`${kind}`, async (t) => {
    const client = await connect(kind);
    t.after(() => client.close());

    await t.test('lists the tools', async () => {
      const { tools } = await client.listTools();
      const names = tools.map((x) => x.name).sort();
      assert.deepEqual(names, ['close_session', 'execute', 'fork_session', 'interrupt', 'list_files',
        'list_sessions', 'new_session', 'upload_file']);
      const exec = tools.find((x) => x.name === 'execute');
      assert.ok(exec.inputSchema.properties.code, 'execute takes code');
    });

    await t.test('executes', async () => {
      const res = await execute(client, { code: 'print(6 * 7)' });
      assert.ok(!res.isError, text(res));
      assert.match(text(res), /42/);
      assert.equal(res.structuredContent.status, 'ok');
      assert.equal(res.structuredContent.stdout, '42\n');
    });

    await t.test('keeps a variable across calls with no session named', async () => {
      await execute(client, { code: 'kept = "across calls"' });
      const res = await execute(client, { code: 'print(kept)' });
      assert.ok(!res.isError, text(res));
      assert.match(text(res), /across calls/);
    });

    await t.test('returns an image block from plt.plot', async () => {
      const res = await execute(client, {
        // savefig, not show: until the sandbox's environment stops forcing MPLBACKEND=Agg,
        // the REPL's backend, which turns show() into files, is not in use.
        code: 'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.savefig("/mnt/data/plot.png")',
      });
      assert.ok(!res.isError, text(res));
      const img = res.content.find((c) => c.type === 'image');
      assert.ok(img, `an image block in ${JSON.stringify(res.content.map((c) => c.type))}`);
      assert.equal(img.mimeType, 'image/png');
      assert.equal(Buffer.from(img.data, 'base64').subarray(1, 4).toString(), 'PNG');
    });

    await t.test('reads a generated CSV as a resource', async () => {
      const res = await execute(client, {
        code: 'with open("/mnt/data/table.csv", "w") as f:\n    f.write("a,b\\n1,2\\n")',
      });
      assert.ok(!res.isError, text(res));
      const link = res.content.find((c) => c.type === 'resource_link' && c.name === 'table.csv');
      assert.ok(link, `a resource link in ${JSON.stringify(res.content)}`);
      assert.match(link.uri, /^kiln:\/\/sessions\/[\w-]{21}\/files\/[\w-]{21}$/);
      const { resourceTemplates } = await client.listResourceTemplates();
      assert.equal(resourceTemplates[0].uriTemplate, 'kiln://sessions/{session_id}/files/{file_id}');
      const read = await client.readResource({ uri: link.uri });
      assert.equal(read.contents[0].text, 'a,b\n1,2\n');
    });

    await t.test('forks a session and the two diverge', async () => {
      const base = await execute(client, { code: 'value = "base"' });
      const sid = base.structuredContent.session_id;
      const fork = await client.callTool({ name: 'fork_session', arguments: { session_id: sid } });
      assert.ok(!fork.isError, text(fork));
      const forked = fork.structuredContent.session_id;
      assert.notEqual(forked, sid);
      await execute(client, { code: 'value = "changed in the fork"', session_id: forked });
      const a = await execute(client, { code: 'print(value)', session_id: sid });
      const b = await execute(client, { code: 'print(value)', session_id: forked });
      assert.equal(a.structuredContent.stdout, 'base\n');
      assert.equal(b.structuredContent.stdout, 'changed in the fork\n');
    });

    await t.test('an abort removes the container within 3 s', async () => {
      const ac = new AbortController();
      let container;
      const seen = new Promise((resolve, reject) => {
        const call = execute(client, { code: `${printContainerID}\nimport time\ntime.sleep(600)` }, {
          signal: ac.signal,
          resetTimeoutOnProgress: true,
          onprogress: (p) => {
            const m = /container (\w+)/.exec(p.message ?? '');
            if (m) { container = m[1]; resolve(); }
          },
        });
        call.then((r) => reject(new Error(`the call ended first: ${text(r)}`)), (err) => { if (!container) reject(err); });
      });
      await seen;
      assert.match(container, /^[0-9a-f]{64}$/, 'the sandbox named its container');
      const t0 = Date.now();
      ac.abort();
      assert.ok(await containerGone(container, 3000), `container ${container} still there after 3 s`);
      t.diagnostic(`container gone ${Date.now() - t0} ms after the abort`);
    });
  });

  test(`${kind}: a wrong key is refused`, async () => {
    await assert.rejects(async () => {
      const c = await connect(kind, 'not-the-key');
      try { await c.listTools(); } finally { await c.close(); }
    });
  });
}
