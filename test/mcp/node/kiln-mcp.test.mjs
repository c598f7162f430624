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

// The sandboxes are Docker containers, or Pods of a cluster when the Go test passes
// KILN_KUBECTL (its kubectl, already pointed at the cluster) and KILN_KUBE_NAMESPACE.
const kubectl = process.env.KILN_KUBECTL;
const namespace = process.env.KILN_KUBE_NAMESPACE;

// sandboxGone polls the runtime until the sandbox ref names is gone: the container with
// that id, or the Pod with that uid (one being deleted counts as gone: it no longer runs).
async function sandboxGone(ref, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    let out;
    if (kubectl) {
      out = execFileSync(kubectl, ['--namespace', namespace, 'get', 'pods', '--output',
        'jsonpath={range .items[?(@.metadata.uid=="' + ref + '")]}{.metadata.name}{.metadata.deletionTimestamp}{"\\n"}{end}'])
        .toString().split('\n').filter((l) => l !== '' && !/\d{4}-\d\d-\d\dT/.test(l)).join('');
    } else {
      out = execFileSync('docker', ['ps', '-aq', '--no-trunc', '--filter', `id=${ref}`]).toString().trim();
    }
    if (out === '') return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

// The sandbox names itself from its mounts: its container's id (runc), or its Pod's uid
// (the kubelet's files come from the Pod's directory).
const printSandboxRef = `
import re
_mounts = open("/proc/self/mountinfo").read()
ids = re.findall(r"/containers/([0-9a-f]{64})/", _mounts) or re.findall(r"/pods/([0-9a-f-]{36})/", _mounts)
print("sandbox", ids[0] if ids else "unknown", flush=True)
`;
const sandboxRef = kubectl ? /^[0-9a-f-]{36}$/ : /^[0-9a-f]{64}$/;

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

    await t.test('an abort removes the sandbox within 3 s', async () => {
      const ac = new AbortController();
      let sandbox;
      const seen = new Promise((resolve, reject) => {
        const call = execute(client, { code: `${printSandboxRef}\nimport time\ntime.sleep(600)` }, {
          signal: ac.signal,
          resetTimeoutOnProgress: true,
          onprogress: (p) => {
            const m = /sandbox ([\w-]+)/.exec(p.message ?? '');
            if (m) { sandbox = m[1]; resolve(); }
          },
        });
        call.then((r) => reject(new Error(`the call ended first: ${text(r)}`)), (err) => { if (!sandbox) reject(err); });
      });
      await seen;
      assert.match(sandbox, sandboxRef, 'the sandbox named itself');
      const t0 = Date.now();
      ac.abort();
      assert.ok(await sandboxGone(sandbox, 3000), `sandbox ${sandbox} still there after 3 s`);
      t.diagnostic(`sandbox gone ${Date.now() - t0} ms after the abort`);
    });
  });

  test(`${kind}: a wrong key is refused`, async () => {
    await assert.rejects(async () => {
      const c = await connect(kind, 'not-the-key');
      try { await c.listTools(); } finally { await c.close(); }
    });
  });
}
