// kiln's POST /exec/programmatic driven by LibreChat's own programmatic tool calling
// client: the Python and bash tools of @librechat/agents, invoked as LibreChat's ToolNode
// invokes them (a ToolCall carrying toolMap, toolDefs and session_id), with real
// LangChain tools on the client side. The Go test in test/ptc starts kiln and runs this
// with node --test, with KILN_URL and KILN_API_KEY set (and KILN_REPLICA_URLS when
// KILN_URL is a load balancer in front of replicas: test/replicas).
//
// The client talks to kiln through a recorder, a loopback HTTP proxy that keeps every
// exchange, so that the tests can count the round trips and see the cancel request the
// client sends on abort. When the client goes away the recorder keeps its request to
// kiln open and reads the answer to the end: so only the client's cancel request can end
// an aborted run.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { tool } from '@langchain/core/tools';
import {
  createProgrammaticToolCallingTool,
  createBashProgrammaticToolCallingTool,
} from '@librechat/agents';

const url = process.env.KILN_URL;
const key = process.env.KILN_API_KEY;
assert.ok(url && key, 'KILN_URL and KILN_API_KEY must be set');

const PTC_PATH = '/v1/exec/programmatic';

function parse(buf) {
  try {
    return JSON.parse(buf.toString());
  } catch {
    return buf.toString();
  }
}

// startRecorder forwards every request to target and records it: method, path,
// headers, body, and once kiln has answered, status and answer (`done` resolves then).
async function startRecorder(target) {
  const exchanges = [];
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    res.on('error', () => {});
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      let finish;
      const ex = {
        method: req.method, path: req.url, headers: req.headers, body: parse(body),
        startedAt: Date.now(), status: 0, answer: undefined,
        done: new Promise((resolve) => { finish = resolve; }),
      };
      exchanges.push(ex);
      const up = http.request(new URL(req.url, upstream), {
        method: req.method, headers: { ...req.headers, host: upstream.host },
      }, (ures) => {
        const uc = [];
        ures.on('data', (c) => uc.push(c));
        ures.on('end', () => {
          const ub = Buffer.concat(uc);
          Object.assign(ex, { status: ures.statusCode, answer: parse(ub), answeredAt: Date.now() });
          finish();
          if (!res.destroyed) {
            res.writeHead(ures.statusCode, ures.headers);
            res.end(ub);
          }
        });
      });
      up.on('error', (err) => {
        Object.assign(ex, { error: err, answeredAt: Date.now() });
        finish();
        if (!res.destroyed) {
          res.writeHead(502);
          res.end(String(err));
        }
      });
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    exchanges,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

const recorder = await startRecorder(url);
after(() => recorder.close());

// LibreChat points its code tools at LIBRECHAT_CODE_BASEURL, which for kiln ends in /v1.
const clientParams = { baseUrl: `${recorder.url}/v1`, authHeaders: { 'X-API-Key': key } };
const pythonPTC = createProgrammaticToolCallingTool(clientParams);
const bashPTC = createBashProgrammaticToolCallingTool(clientParams);

// programmaticPosts returns the POSTs to /v1/exec/programmatic since mark.
function programmaticPosts(mark) {
  return recorder.exchanges.slice(mark).filter((e) => e.path === PTC_PATH);
}

// runMark is where the exchanges of the current invocation start.
let runMark = 0;

// clientTool is a LangChain tool that records each invocation: its input, and which
// round of the run asked for it (the number of POSTs to /exec/programmatic so far).
function clientTool(log, name, properties, fn, required = Object.keys(properties)) {
  return tool(async (input) => {
    log.push({ name, input, round: programmaticPosts(runMark).length });
    return fn(input);
  }, {
    name,
    description: `${name}, a tool of kiln's tests`,
    schema: { type: 'object', properties, required },
  });
}

let calls = 0;

// invoke runs code through a PTC tool as LibreChat's ToolNode does: the tool call
// carries the tool map, the tool definitions and the session. It returns the
// ToolMessage and the POSTs to /exec/programmatic that the invocation made.
async function invoke(ptc, code, tools, extra = {}, config = {}) {
  const mark = recorder.exchanges.length;
  runMark = mark;
  const message = await ptc.invoke({
    type: 'tool_call',
    id: `call_${++calls}`,
    name: ptc.name,
    args: { code },
    toolMap: new Map(tools.map((t) => [t.name, t])),
    toolDefs: tools.map((t) => ({
      name: t.name, description: t.description, parameters: t.schema, allowed_callers: ['code_execution'],
    })),
    ...extra,
  }, config);
  return { message, posts: programmaticPosts(mark) };
}

function lastAnswer(posts) {
  const last = posts.at(-1);
  assert.ok(last, 'no POST to /exec/programmatic');
  return last.answer;
}

function assertCompleted(posts, stdout) {
  const a = lastAnswer(posts);
  assert.equal(a.status, 'completed', JSON.stringify(a));
  assert.equal(a.run_status, 'ok', JSON.stringify(a));
  assert.equal(a.exit_code, 0, JSON.stringify(a));
  assert.equal(a.stdout, stdout, JSON.stringify(a));
  return a;
}

async function kiln(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: { 'X-API-Key': key, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return res;
}

// inUse counts the sandboxes in use: of the one kiln at KILN_URL, or, when the test runs
// through a load balancer in front of replicas, of every replica in KILN_REPLICA_URLS.
const replicas = (process.env.KILN_REPLICA_URLS || url).split(',');

async function inUse() {
  let n = 0;
  for (const base of replicas) {
    const res = await fetch(base + '/health/detailed', { headers: { 'X-API-Key': key } });
    assert.equal(res.status, 200);
    n += (await res.json()).pool.in_use;
  }
  return n;
}

async function waitFor(what, ms, cond) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) assert.fail(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

test('python: a tool call returns its decoded result to the program', async () => {
  const log = [];
  const weather = clientTool(log, 'get-weather', { city: { type: 'string' } },
    ({ city }) => ({ city, temp_c: 21.5, tags: ['sunny', 'dry'] }));
  const { message, posts } = await invoke(pythonPTC,
    'w = await get_weather(city="Paris")\nprint(w["city"], w["temp_c"], w["tags"][1], type(w).__name__)',
    [weather]);

  assert.deepEqual(log.map((l) => [l.name, l.input]), [['get-weather', { city: 'Paris' }]]);
  assert.equal(posts.length, 2, 'one start and one continuation');
  const [first, second] = posts;
  assert.equal(first.status, 200);
  assert.equal(first.answer.status, 'tool_call_required', JSON.stringify(first.answer));
  assert.equal(first.answer.tool_calls.length, 1);
  assert.equal(first.answer.tool_calls[0].name, 'get-weather', 'the original name, not the Python one');
  assert.deepEqual(first.answer.tool_calls[0].input, { city: 'Paris' });
  assert.ok(first.answer.continuation_token && first.answer.execution_id, JSON.stringify(first.answer));
  assert.equal(second.body.continuation_token, first.answer.continuation_token);
  const done = assertCompleted(posts, 'Paris 21.5 dry dict\n');
  assert.match(message.content, /Paris 21\.5 dry dict/);
  assert.equal(message.artifact.session_id, done.session_id);
});

test('python: three gathered calls arrive together in one answer', async () => {
  const log = [];
  // Each call waits until all three are running: the client invokes one answer's calls
  // together and sends nothing until they have all returned, so calls that came in
  // separate answers would never meet, and the first would fail after 5 s.
  let arrived = 0;
  let allArrived;
  const together = new Promise((resolve) => { allArrived = resolve; });
  const stock = clientTool(log, 'stock-price', { ticker: { type: 'string' } }, async ({ ticker }) => {
    if (++arrived === 3) allArrived();
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`only ${arrived} of 3 calls arrived together`)), 5000);
    });
    try {
      await Promise.race([together, timeout]);
    } finally {
      clearTimeout(timer);
    }
    return { ticker, price: { AAA: 1, BBB: 20, CCC: 300 }[ticker] };
  });
  const { posts } = await invoke(pythonPTC, [
    'import asyncio',
    'quotes = await asyncio.gather(stock_price(ticker="AAA"), stock_price(ticker="BBB"), stock_price(ticker="CCC"))',
    'print(" ".join(f"{q[\'ticker\']}={q[\'price\']}" for q in quotes))',
  ].join('\n'), [stock]);

  assertCompleted(posts, 'AAA=1 BBB=20 CCC=300\n');
  assert.equal(posts.length, 2, 'one start and one continuation carrying all three results');
  const calls = posts[0].answer.tool_calls;
  assert.deepEqual(calls.map((c) => c.name), ['stock-price', 'stock-price', 'stock-price']);
  assert.deepEqual(calls.map((c) => c.input.ticker).sort(), ['AAA', 'BBB', 'CCC']);
  assert.equal(new Set(calls.map((c) => c.id)).size, 3, 'distinct call ids');
  assert.equal(log.length, 3);
  assert.deepEqual(log.map((l) => l.round), [1, 1, 1], 'all three invoked after the first answer');
});

test('python: a tool that throws raises in the program, which catches it', async () => {
  const log = [];
  const quota = clientTool(log, 'check-quota', {}, () => {
    throw new Error('quota exceeded for user 7');
  });
  const { posts } = await invoke(pythonPTC, [
    'try:',
    '    await check_quota()',
    '    print("no exception")',
    'except Exception as e:',
    '    print("caught:", e)',
    'print("after")',
  ].join('\n'), [quota]);

  assert.equal(log.length, 1);
  assert.equal(posts.length, 2);
  const sent = posts[1].body.tool_results;
  assert.equal(sent[0].is_error, true);
  assert.equal(sent[0].error_message, 'quota exceeded for user 7');
  assertCompleted(posts, 'caught: quota exceeded for user 7\nafter\n');
});

test('python: the program sees the variables of the session it is given', async () => {
  const res = await kiln('POST', '/exec', { code: 'x = 41', lang: 'py' });
  assert.equal(res.status, 200);
  const created = await res.json();
  assert.equal(created.status, 'ok', JSON.stringify(created));
  const sid = created.session_id;

  const log = [];
  const step = clientTool(log, 'get-increment', {}, () => 1);
  const { message, posts } = await invoke(pythonPTC, 'step = await get_increment()\nprint(x + step)', [step],
    { session_id: sid });

  assert.equal(posts[0].body.session_id, sid, 'the client sent the session');
  const done = assertCompleted(posts, '42\n');
  assert.equal(done.session_id, sid);
  assert.equal(message.artifact.session_id, sid);
});

test('python: a file written next to tool results comes back in the artifact', async () => {
  const log = [];
  const prices = { apple: 1.25, pear: 0.8 };
  const price = clientTool(log, 'get-price', { item: { type: 'string' } }, ({ item }) => prices[item]);
  const { message, posts } = await invoke(pythonPTC, [
    'import asyncio, json',
    'apple, pear = await asyncio.gather(get_price(item="apple"), get_price(item="pear"))',
    'with open("/mnt/data/prices.json", "w") as f:',
    '    json.dump({"apple": apple, "pear": pear}, f)',
    'print("saved")',
  ].join('\n'), [price]);

  assertCompleted(posts, 'saved\n');
  const { artifact } = message;
  const file = artifact.files?.find((f) => f.name === 'prices.json');
  assert.ok(file, `prices.json in the artifact's files: ${JSON.stringify(artifact)}`);
  const res = await kiln('GET', `/download/${artifact.session_id}/${file.id}`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), prices);
});

test('bash: a tool takes a JSON argument and its output is parsed in the script', async () => {
  const log = [];
  const user = clientTool(log, 'get-user', { id: { type: 'integer' } },
    ({ id }) => ({ id, name: 'Ada', langs: ['en', 'fr'] }));
  const greet = clientTool(log, 'greet', { who: { type: 'string' } }, ({ who }) => `hello, ${who}!`);
  // jq is not in the sandbox image: python3 parses the JSON.
  const { posts } = await invoke(bashPTC, [
    'raw=$(get_user \'{"id": 7}\')',
    'name=$(printf \'%s\' "$raw" | python3 -c \'import json, sys; u = json.load(sys.stdin); print(u["name"], u["langs"][1])\')',
    'echo "raw=$raw"',
    'echo "name=$name"',
    'echo "greeting=[$(greet \'{"who": "Ada"}\')]"',
  ].join('\n'), [user, greet]);

  assert.deepEqual(log.map((l) => [l.name, l.input]), [['get-user', { id: 7 }], ['greet', { who: 'Ada' }]]);
  assert.equal(posts.length, 3, 'one start and one continuation per sequential call');
  assert.equal(posts[0].body.lang, 'bash');
  const done = lastAnswer(posts);
  assert.equal(done.status, 'completed', JSON.stringify(done));
  const lines = done.stdout.split('\n');
  const raw = lines.find((l) => l.startsWith('raw='))?.slice(4);
  assert.ok(raw !== undefined, JSON.stringify(done));
  assert.doesNotMatch(raw, /\s/, 'a non-string result is printed as compact JSON');
  assert.deepEqual(JSON.parse(raw), { id: 7, name: 'Ada', langs: ['en', 'fr'] });
  assert.ok(lines.includes('name=Ada fr'), JSON.stringify(done));
  assert.ok(lines.includes('greeting=[hello, Ada!]'), 'a string result is printed as it is');
});

test('abort: the client cancels the run in kiln, whose sandbox is free within 3 s', async (t) => {
  await waitFor('no sandbox in use before the run', 15_000, async () => (await inUse()) === 0);
  const log = [];
  const job = clientTool(log, 'start-job', {}, () => 'started');
  const ac = new AbortController();
  const mark = recorder.exchanges.length;
  const call = invoke(pythonPTC, 'await start_job()\nimport time\ntime.sleep(30)\nprint("not reached")', [job], {},
    { signal: ac.signal });
  call.catch(() => {});

  // The continuation that carries the tool's result resumes the program into its sleep.
  const resumed = await waitFor('the continuation request', 60_000,
    () => programmaticPosts(mark).find((e) => e.body?.continuation_token));
  await sleep(500);
  assert.equal(resumed.status, 0, 'the continuation is still running');
  assert.equal(await inUse(), 1, 'the sleeping program holds a sandbox');
  const rid = resumed.headers['x-librechat-code-request-id'];
  assert.ok(rid, 'the client sends a request id with every request it can abort');

  const aborted = Date.now();
  ac.abort();
  await assert.rejects(call);

  const cancel = await waitFor('the client\'s cancel request', 3000,
    () => recorder.exchanges.slice(mark).find((e) => e.path === `${PTC_PATH}/cancel` && e.answeredAt));
  assert.deepEqual(cancel.body, { request_id: rid });
  assert.equal(cancel.status, 202, JSON.stringify(cancel.answer));
  assert.equal(cancel.answer.status, 'cancellation_requested');

  await waitFor('no sandbox in use', Math.max(0, aborted + 3000 - Date.now()), async () => (await inUse()) === 0);
  const freed = Date.now() - aborted;

  await Promise.race([resumed.done, sleep(10_000, undefined, { ref: false })]);
  assert.equal(resumed.status, 200, 'kiln answered the cancelled continuation');
  assert.equal(resumed.answer.status, 'error', JSON.stringify(resumed.answer));
  assert.equal(resumed.answer.run_status, 'cancelled', JSON.stringify(resumed.answer));
  assert.equal(log.length, 1);
  t.diagnostic(`sandbox free ${freed} ms after the abort`);
});
