// kiln's POST /exec driven by LibreChat's own code execution tool (createCodeExecutionTool
// of @librechat/agents) in languages other than Python: js and r, the polyglot pool's.
// The tool is invoked as LibreChat's ToolNode invokes it: a ToolCall whose args are what the
// model wrote (lang, code, args), carrying session_id and _injected_files for a call that
// continues a session. The Go test TestLibreChatCodeTool in test/languages starts kiln with
// POOLS=python:1,polyglot:1 and runs this with node --test, KILN_URL and KILN_API_KEY set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createCodeExecutionTool } from '@librechat/agents';

const url = process.env.KILN_URL;
const key = process.env.KILN_API_KEY;
assert.ok(url && key, 'KILN_URL and KILN_API_KEY must be set');

// LibreChat points its code tool at LIBRECHAT_CODE_BASEURL, which for kiln ends in /v1.
const codeTool = createCodeExecutionTool({ baseUrl: `${url}/v1`, authHeaders: { 'X-API-Key': key } });

let calls = 0;

// invoke runs one call of the tool as ToolNode does and returns its ToolMessage: content is
// what the model reads, artifact what LibreChat keeps (session_id, files).
async function invoke(args, extra = {}) {
  const message = await codeTool.invoke({
    type: 'tool_call',
    id: `call_${++calls}`,
    name: codeTool.name,
    args,
    ...extra,
  });
  assert.equal(typeof message.content, 'string', JSON.stringify(message));
  assert.ok(message.artifact?.session_id, `an artifact with a session: ${JSON.stringify(message)}`);
  return message;
}

async function download(sessionId, fileId) {
  const res = await fetch(`${url}/v1/download/${sessionId}/${fileId}`, { headers: { 'X-API-Key': key } });
  assert.equal(res.status, 200, `download ${sessionId}/${fileId}`);
  return Buffer.from(await res.arrayBuffer());
}

test('js: stdout and args come back as the tool output', async () => {
  const message = await invoke({
    lang: 'js',
    code: 'console.log("hello from js");\nfor (const a of process.argv.slice(2)) console.log("[" + a + "]");',
    args: ['one', 'two words'],
  });
  assert.equal(message.content, 'stdout:\nhello from js\n[one]\n[two words]');
  assert.equal(message.artifact.files, undefined, 'no file, no files in the artifact');
});

test('js: a syntax error comes back as the parser\'s message on stderr', async () => {
  const message = await invoke({ lang: 'js', code: 'console.log("unclosed";' });
  assert.match(message.content, /^stdout: Empty\./, message.content);
  assert.match(message.content, /\nstderr:\n[^]*SyntaxError: missing \) after argument list/, message.content);
});

test('r: a runtime error comes back on stderr, after the output', async () => {
  const message = await invoke({ lang: 'r', code: 'cat("before\\n")\nstop("boom at runtime")' });
  assert.match(message.content, /^stdout:\nbefore\n/, message.content);
  assert.match(message.content, /\nstderr:\nError: boom at runtime/, message.content);
});

test('js writes a CSV, r reads it in the same session and plots it with png()', async () => {
  const js = await invoke({
    lang: 'js',
    code: [
      'const fs = require("fs");',
      'const rows = [["day", "visits"], [1, 120], [2, 80], [3, 100]];',
      'fs.writeFileSync("/mnt/data/visits.csv", rows.map((r) => r.join(",")).join("\\n") + "\\n");',
      'console.log("rows:", rows.length - 1);',
    ].join('\n'),
  });
  assert.match(js.content, /^stdout:\nrows: 3\n/, js.content);
  const csv = js.artifact.files?.find((f) => f.name === 'visits.csv');
  assert.ok(csv, `visits.csv in the artifact: ${JSON.stringify(js.artifact)}`);
  assert.match(js.content, /Generated files:\nSession files: 1 persisted file\(s\)[^]*including 0 image\(s\)/, js.content);
  assert.equal((await download(js.artifact.session_id, csv.id)).toString(), 'day,visits\n1,120\n2,80\n3,100\n');

  // The next call carries the session and the files LibreChat keeps for it.
  const r = await invoke({
    lang: 'r',
    code: [
      'd <- read.csv("/mnt/data/visits.csv")',
      'cat("mean visits: ", mean(d$visits), "\\n", sep = "")',
      'png("/mnt/data/visits.png", width = 640, height = 480)',
      'plot(d$day, d$visits, type = "l", main = "visits")',
      'invisible(dev.off())',
    ].join('\n'),
  }, {
    session_id: js.artifact.session_id,
    _injected_files: [{ id: csv.id, session_id: csv.session_id, name: csv.name }],
  });
  assert.match(r.content, /^stdout:\nmean visits: 100\n/, r.content);
  assert.equal(r.artifact.session_id, js.artifact.session_id, 'the same session');
  const names = (r.artifact.files ?? []).map((f) => f.name);
  assert.deepEqual(names, ['visits.png'], `only the new plot, not the unchanged CSV: ${JSON.stringify(r.artifact)}`);
  assert.match(r.content, /Generated files:\nSession files: 1 persisted file\(s\)[^]*including 1 image\(s\)/, r.content);
  const png = await download(r.artifact.session_id, r.artifact.files[0].id);
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'the PNG signature');
  assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [640, 480], 'the size the code drew');
});
