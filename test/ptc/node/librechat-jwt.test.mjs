// kiln as LibreChat ships today: per-user JWTs minted exactly as LibreChat's
// packages/api/src/auth/codeapi.ts mints them, files scoped to a user or a skill, and
// @librechat/agents' own code, bash and programmatic tools. The Go test in
// test/librechat starts kiln with the public keys and runs this with node --test, with
// KILN_URL, KILN_API_KEY and the private keys (LC_ED25519_PRIVATE_KEY, LC_RSA_PRIVATE_KEY:
// PEM on one line, as LibreChat's CODEAPI_JWT_PRIVATE_KEY carries it) and their kids set.
//
// Uploads, freshness checks and deletes are made as LibreChat's crud.js makes them, with
// form-data and axios (both pinned in package-lock.json, as dependencies of the agents
// package). The tools talk to kiln through a recorder, a loopback proxy that keeps every
// exchange, so that the tests can see kiln's own answers behind a tool's error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { createHash, randomUUID } from 'node:crypto';
import FormData from 'form-data';
import axios from 'axios';
import { tool } from '@langchain/core/tools';
import {
  createCodeExecutionTool,
  createBashExecutionTool,
  createProgrammaticToolCallingTool,
} from '@librechat/agents';
import { createCodeApiAuth, stringifyClaimValue } from './codeapi.mjs';

const env = process.env;
const kilnURL = env.KILN_URL;
for (const name of ['KILN_URL', 'LC_ED25519_PRIVATE_KEY', 'LC_ED25519_KID', 'LC_RSA_PRIVATE_KEY', 'LC_RSA_KID']) {
  assert.ok(env[name], `${name} must be set`);
}

// Two LibreChat deployments: acme's signs EdDSA under LibreChat's default kid, globex's RS256.
const edAuth = createCodeApiAuth({ alg: 'EdDSA', kid: env.LC_ED25519_KID, privateKey: env.LC_ED25519_PRIVATE_KEY });
const rsAuth = createCodeApiAuth({ alg: 'RS256', kid: env.LC_RSA_KID, privateKey: env.LC_RSA_PRIVATE_KEY });

// LibreChat requests (req.user as LibreChat's auth middleware leaves it), each with the
// deployment that mints its tokens. Carol signs in through OpenID and carries the
// optional identity claims.
const alice = { user: { id: '66c0a11ce0000000000000a1', role: 'USER', tenantId: 'acme' }, authStrategy: 'jwt', auth: edAuth };
const bob = { user: { id: '66c0b0b000000000000000b2', role: 'USER', tenantId: 'acme' }, authStrategy: 'jwt', auth: edAuth };
const carol = {
  user: {
    _id: { toString: () => '66c0ca4010000000000000c3' }, role: 'ADMIN', tenantId: 'globex',
    orgId: 'org-globex', idOnTheSource: 'chc-7731', subscription: { planId: 'team' },
  },
  authStrategy: 'openidJwt',
  auth: rsAuth,
};
const userId = (req) => stringifyClaimValue(req.user.id) ?? req.user._id.toString();
const authHeaders = (req) => req.auth.getCodeApiAuthHeaders(req);

function decode(token) {
  const [h, c] = token.split('.');
  return { header: JSON.parse(Buffer.from(h, 'base64url')), claims: JSON.parse(Buffer.from(c, 'base64url')) };
}

// ---------------------------------------------------------------------------------------
// The recorder, and LibreChat's HTTP calls.
// ---------------------------------------------------------------------------------------

function parse(buf) {
  try {
    return JSON.parse(buf.toString());
  } catch {
    return buf.toString();
  }
}

async function startRecorder(target) {
  const exchanges = [];
  const upstream = new URL(target);
  const agent = new http.Agent({ keepAlive: true }); // its own sockets: see codeServerHttpAgent
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const ex = { method: req.method, path: req.url, headers: req.headers, body: parse(body) };
      exchanges.push(ex);
      const up = http.request(new URL(req.url, upstream), {
        method: req.method, headers: { ...req.headers, host: upstream.host }, agent,
      }, (ures) => {
        const uc = [];
        ures.on('data', (c) => uc.push(c));
        ures.on('end', () => {
          const ub = Buffer.concat(uc);
          Object.assign(ex, { status: ures.statusCode, answerHeaders: ures.headers, answer: parse(ub) });
          res.writeHead(ures.statusCode, ures.headers);
          res.end(ub);
        });
      });
      up.on('error', (err) => {
        ex.error = err;
        res.writeHead(502);
        res.end(String(err));
      });
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    exchanges,
    since: (mark) => exchanges.slice(mark),
    close: () => new Promise((resolve) => {
      agent.destroy();
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

const recorder = await startRecorder(kilnURL);
after(() => recorder.close());

// LIBRECHAT_CODE_BASEURL, which for kiln ends in /v1.
const baseURL = `${recorder.url}/v1`;

// crud.js's axios calls, on LibreChat's codeServerHttpAgent: no keep-alive, because
// follow-redirects (under axios) leaves socket.destroy on a socket's timeout, and a socket
// back in Node's global pool would then cut the tools' next slow request after 5 s. This
// instance answers every status, so that the tests read refusals.
const codeServerHttpAgent = new http.Agent({ keepAlive: false });
const codeAPI = axios.create({ validateStatus: () => true, httpAgent: codeServerHttpAgent });

// getCodeEnvFileOptions and appendCodeEnvFile (packages/api/src/files/code/form.ts): a
// nested name goes as form-data's filepath, so that the part's filename keeps its path.
const CODE_ENV_FILEPATH_CHARS = /^[\p{L}\p{M}\p{N}\p{Extended_Pictographic}._\-/]+$/u;
function getCodeEnvFileOptions(filename) {
  const normalized = filename.replace(/\\/g, '/');
  const base = path.posix.basename(normalized) || 'file';
  if (normalized === filename && filename === base) return { filename };
  const safe = !normalized.startsWith('/') && CODE_ENV_FILEPATH_CHARS.test(normalized)
    && normalized.split('/').every((s) => s !== '' && s !== '.' && s !== '..');
  return safe ? { filename: base, filepath: normalized } : { filename: base };
}

// appendCodeEnvFileIdentity: kind, id and (a skill's) version, before any file.
function appendCodeEnvFileIdentity(form, { kind, id, version }) {
  form.append('kind', kind);
  form.append('id', id);
  if (version != null) form.append('version', String(version));
}

async function uploadHeaders(req, form) {
  return {
    ...form.getHeaders(),
    'Content-Type': 'multipart/form-data',
    'User-Agent': 'LibreChat/1.0',
    'User-Id': userId(req),
    ...(await authHeaders(req)),
  };
}

// uploadCodeEnvFile (crud.js): one file to POST /upload.
async function uploadCodeEnvFile(req, { buffer, filename, kind, id, version }) {
  const form = new FormData();
  appendCodeEnvFileIdentity(form, { kind, id, version });
  form.append('file', buffer, getCodeEnvFileOptions(filename));
  return codeAPI.post(`${kilnURL}/v1/upload`, form, { headers: await uploadHeaders(req, form), timeout: 120000 });
}

// batchUploadCodeEnvFiles (crud.js): many files to POST /upload/batch, read_only after
// the identity.
async function batchUploadCodeEnvFiles(req, { files, kind, id, version, read_only = false }) {
  const form = new FormData();
  appendCodeEnvFileIdentity(form, { kind, id, version });
  if (read_only) form.append('read_only', 'true');
  for (const f of files) form.append('file', f.buffer, getCodeEnvFileOptions(f.filename));
  return codeAPI.post(`${kilnURL}/v1/upload/batch`, form, { headers: await uploadHeaders(req, form), timeout: 120000 });
}

// buildCodeEnvDownloadQuery: ?kind=&id=[&version=].
function identityQuery({ kind, id, version }) {
  const params = new URLSearchParams({ kind, id });
  if (version != null) params.set('version', String(version));
  return `?${params}`;
}

// getCodeFileInfo (priming.ts): the object's metadata, null on any error.
async function getCodeFileInfo(req, sid, fid, identity) {
  const res = await codeAPI.get(`${kilnURL}/v1/sessions/${sid}/objects/${fid}${identityQuery(identity)}`, {
    headers: { 'User-Agent': 'LibreChat/1.0', ...(await authHeaders(req)) }, timeout: 5000,
  });
  return { res, info: res.status === 200 ? res.data : null };
}

// checkCodeFileActive: a file LibreChat still trusts is under 23 hours old.
const checkCodeFileActive = (lastModified) => Date.now() - new Date(lastModified).getTime() < 23 * 3600 * 1000;

async function kiln(req, method, route, { responseType } = {}) {
  return codeAPI.request({
    method, url: `${kilnURL}/v1${route}`, responseType,
    headers: { 'User-Agent': 'LibreChat/1.0', ...(await authHeaders(req)) },
  });
}

let calls = 0;

// invoke runs a tool as LibreChat's ToolNode does: the tool call carries the injected
// files, session and runtime hint. It returns the ToolMessage and the exchanges it made.
// A tool that fails says what kiln answered, which its own message hides.
async function invoke(t, args, extra = {}) {
  const mark = recorder.exchanges.length;
  try {
    const message = await t.invoke({ type: 'tool_call', id: `call_${++calls}`, name: t.name, args, ...extra });
    return { message, exchanges: recorder.since(mark) };
  } catch (err) {
    const seen = recorder.since(mark).map((e) => `${e.method} ${e.path} -> ${e.status} ${JSON.stringify(e.answer)}`.slice(0, 600));
    throw new Error(`${t.name} failed: ${err.message}\nkiln answered:\n${seen.join('\n')}`, { cause: err });
  }
}

// rejected runs a tool that must fail and returns its error and the exchanges it made.
async function rejected(t, args, extra = {}) {
  const mark = recorder.exchanges.length;
  let error;
  try {
    await t.invoke({ type: 'tool_call', id: `call_${++calls}`, name: t.name, args, ...extra });
  } catch (err) {
    error = err;
  }
  assert.ok(error, 'the tool did not fail');
  return { error, exchanges: recorder.since(mark) };
}

// codeTool is execute_code as LibreChat builds it for req: auth headers minted per call,
// the host's own params (user_id, codeSessionKey) riding in the body.
function codeTool(req, params = {}) {
  return createCodeExecutionTool({
    baseUrl: baseURL, authHeaders: () => authHeaders(req),
    user_id: userId(req), codeSessionKey: 'execute_code', ...params,
  });
}

// ---------------------------------------------------------------------------------------
// Data: a skill as LibreChat primes it (skills/<name>/<relativePath>), with a CSV of a
// few thousand orders whose totals the tests know.
// ---------------------------------------------------------------------------------------

function salesCSV(rows) {
  const regions = ['north', 'south', 'east', 'west'];
  const totals = {};
  const lines = ['order_id,region,units,unit_price_cents'];
  for (let i = 0; i < rows; i++) {
    const region = regions[i % 4];
    const units = 1 + (i % 7);
    const price = 250 + ((i * 37) % 900);
    totals[region] = (totals[region] ?? 0) + units * price;
    lines.push(`${100000 + i},${region},${units},${price}`);
  }
  return { csv: `${lines.join('\n')}\n`, totals, rows };
}

const sales = salesCSV(3000);
const grandTotal = Object.values(sales.totals).reduce((a, b) => a + b, 0);
const byRegionJSON = JSON.stringify(Object.fromEntries(Object.entries(sales.totals).sort(([a], [b]) => a.localeCompare(b))));
const editing = '# Editing decks\nKeep one idea per slide.\nUse the brand palette from data/palette.json.\n';
const skill = { _id: '66c0d5a1110000000000ed17', name: 'pptx', version: 7 };
const skillFiles = [
  { filename: 'skills/pptx/SKILL.md', buffer: Buffer.from('---\nname: pptx\n---\nEdit decks; see editing.md.\n') },
  { filename: 'skills/pptx/editing.md', buffer: Buffer.from(editing) },
  { filename: 'skills/pptx/data/sales.csv', buffer: Buffer.from(sales.csv) },
  { filename: 'skills/pptx/data/palette.json', buffer: Buffer.from('{"primary":"#0b3d91","accent":"#fc3d21"}\n') },
];
const skillIdentity = { kind: 'skill', id: skill._id, version: skill.version };

let primed; // the batch upload's answer
let skillRefs; // the files as LibreChat injects them, named as uploaded

before(async () => {
  const res = await batchUploadCodeEnvFiles(alice, { files: skillFiles, ...skillIdentity, read_only: true });
  assert.equal(res.status, 200, JSON.stringify(res.data));
  primed = res.data;
  assert.ok(primed.storage_session_id && Array.isArray(primed.files), JSON.stringify(primed));
  // primeSkillFiles leaves SKILL.md out and names each ref by the answer's filename; the
  // refs here take the name uploaded, which the answer must repeat (a test below checks
  // that), so that a wrong answer does not hide what the other tests check.
  skillRefs = primed.files
    .map((f, i) => ({ f, uploadedAs: skillFiles[i].filename }))
    .filter(({ uploadedAs }) => !uploadedAs.endsWith('/SKILL.md'))
    .map(({ f, uploadedAs }) => ({
      id: f.fileId, resource_id: skill._id, storage_session_id: primed.storage_session_id,
      name: uploadedAs, kind: 'skill', version: skill.version,
    }));
});

const refNamed = (name) => skillRefs.find((r) => r.name === name);

// ---------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------

test('tokens are minted as codeapi.ts mints them, reused for 30 s, and kiln accepts them', async () => {
  const first = await alice.auth.mintCodeApiToken(alice);
  const { header, claims } = decode(first);
  assert.deepEqual(Object.keys(header), ['alg', 'typ', 'kid']);
  assert.deepEqual(header, { alg: 'EdDSA', typ: 'JWT', kid: env.LC_ED25519_KID });
  assert.deepEqual(Object.keys(claims), ['iss', 'aud', 'sub', 'iat', 'nbf', 'exp', 'jti', 'tenant_id', 'role',
    'principal_source', 'auth_context_hash']);
  assert.equal(claims.aud, 'codeapi');
  assert.equal(claims.nbf, claims.iat);
  assert.equal(claims.exp - claims.iat, 300);
  assert.equal(claims.auth_context_hash, createHash('sha256').update(
    `{"chc_user_id":"","org_id":"","principal_source":"librechat_jwt","role":"USER","service_id":"","sub":"${alice.user.id}","tenant_id":"acme"}`,
  ).digest('hex'));

  const signedBefore = edAuth.signedCount();
  assert.equal(await alice.auth.mintCodeApiToken(alice), first, 'the same token within 30 s');
  assert.equal(edAuth.signedCount(), signedBefore, 'nothing signed for a reuse');
  assert.notEqual(await bob.auth.mintCodeApiToken(bob), first, 'another user, another token');

  const rs = decode(await carol.auth.mintCodeApiToken(carol));
  assert.deepEqual(rs.header, { alg: 'RS256', typ: 'JWT', kid: env.LC_RSA_KID });
  assert.equal(rs.claims.sub, '66c0ca4010000000000000c3');
  assert.equal(rs.claims.principal_source, 'openid_reuse');
  assert.deepEqual([rs.claims.org_id, rs.claims.chc_user_id, rs.claims.plan_id], ['org-globex', 'chc-7731', 'team']);

  for (const req of [alice, bob, carol, alice]) {
    const res = await kiln(req, 'GET', '/sessions');
    assert.equal(res.status, 200, `${req.user.tenantId}: ${JSON.stringify(res.data)}`);
    assert.equal(res.headers['x-codeapi-execution-profile'], 'default');
  }
});

test('a skill primed with /upload/batch as crud.js sends it keeps its paths and is fresh', async () => {
  assert.equal(primed.message, 'success', JSON.stringify(primed));
  assert.equal(primed.succeeded, skillFiles.length);
  assert.equal(primed.failed, 0);
  assert.ok(primed.files.every((f) => f.status === 'success' && f.fileId), JSON.stringify(primed.files));
  // LibreChat names each ref by the answer's filename and drops SKILL.md by its
  // "/SKILL.md" suffix: the answer must carry the paths as uploaded.
  assert.deepEqual(primed.files.map((f) => f.filename), skillFiles.map((f) => f.filename));

  // getSessionInfo + checkCodeFileActive, as primeInvokedSkills checks a cached skill, by
  // another user of the tenant.
  const ref = refNamed('skills/pptx/editing.md');
  const { res, info } = await getCodeFileInfo(bob, ref.storage_session_id, ref.id, skillIdentity);
  assert.equal(res.status, 200, JSON.stringify(res.data));
  assert.ok(checkCodeFileActive(info.lastModified), info.lastModified);
  assert.equal(info.size, Buffer.byteLength(editing));
  assert.equal(info.readOnly, true);
  assert.equal(info.originalFilename, 'skills/pptx/editing.md');
});

const readSkill = `import pandas as pd
df = pd.read_csv("/mnt/data/skills/pptx/data/sales.csv")
df["revenue"] = df.units * df.unit_price_cents
by_region = df.groupby("region").revenue.sum().sort_index()
print(len(df), int(df.revenue.sum()))
print(by_region.to_json())
print(open("/mnt/data/skills/pptx/editing.md").readline().strip())
`;
const readSkillOut = `${sales.rows} ${grandTotal}\n${byRegionJSON}\n# Editing decks\n`;

test('alice and bob of one tenant run the skill\'s CSV through pandas with the code tool', async () => {
  const sessions = [];
  for (const req of [alice, bob]) {
    const { message, exchanges } = await invoke(codeTool(req), { lang: 'py', code: readSkill },
      { session_id: primed.storage_session_id, _injected_files: skillRefs });
    const post = exchanges.find((e) => e.path === '/v1/exec');
    assert.equal(post.status, 200, JSON.stringify(post.answer));
    assert.equal(post.answer.stdout, readSkillOut, post.answer.stderr);
    assert.match(message.content, /3000 /);
    assert.deepEqual(post.body.files, skillRefs, 'the refs went as LibreChat sends them');
    assert.equal(post.headers.authorization, `Bearer ${await req.auth.mintCodeApiToken(req)}`);
    assert.equal(post.headers['x-api-key'], undefined);
    assert.notEqual(message.artifact.session_id, primed.storage_session_id, 'the run is the user\'s, not the skill\'s');
    sessions.push(message.artifact.session_id);
  }
  assert.notEqual(sessions[0], sessions[1], 'each user runs in a session of their own');
  const peek = await kiln(bob, 'GET', `/sessions/${sessions[0]}`);
  assert.equal(peek.status, 404, 'bob does not see alice\'s run');
});

test('a run that changes a skill file gets it back inherited; bob still reads the original', async () => {
  const ref = refNamed('skills/pptx/editing.md');
  const change = `import pandas as pd
with open("/mnt/data/skills/pptx/editing.md", "a") as f:
    f.write("alice's note: use 40 pt titles\\n")
df = pd.read_csv("/mnt/data/skills/pptx/data/sales.csv")
df["revenue"] = df.units * df.unit_price_cents
df.groupby("region", as_index=False).revenue.sum().to_csv("/mnt/data/summary.csv", index=False)
print("changed")
`;
  const { message } = await invoke(codeTool(alice), { lang: 'py', code: change }, { _injected_files: skillRefs });
  const files = message.artifact.files ?? [];
  const back = files.find((f) => f.name === 'skills/pptx/editing.md');
  assert.ok(back, `editing.md in the artifact: ${JSON.stringify(files)}`);
  assert.equal(back.inherited, true);
  assert.equal(back.id, ref.id);
  assert.equal(back.storage_session_id, ref.storage_session_id);
  const summary = files.find((f) => f.name === 'summary.csv');
  assert.ok(summary && summary.inherited !== true, JSON.stringify(files));
  assert.equal(summary.storage_session_id, message.artifact.session_id);
  assert.equal(files.length, 2, `only the changed skill file and the new output: ${JSON.stringify(files)}`);
  assert.match(message.content, /Session files: 1 persisted file\(s\)/, 'the inherited file is not reported generated');

  // getCodeOutputDownloadStream: the output, with the user's identity query.
  const out = await kiln(alice, 'GET', `/download/${summary.storage_session_id}/${summary.id}${identityQuery({ kind: 'user', id: userId(alice) })}`);
  assert.equal(out.status, 200);
  const expected = ['region,revenue', ...Object.entries(sales.totals).sort(([a], [b]) => a.localeCompare(b)).map(([r, v]) => `${r},${v}`)];
  assert.deepEqual(String(out.data).trim().split('\n'), expected);

  // The stored skill file is unchanged: bob reads the original, by download and in a run.
  const dl = await kiln(bob, 'GET', `/download/${ref.storage_session_id}/${ref.id}${identityQuery(skillIdentity)}`);
  assert.equal(dl.status, 200);
  assert.equal(String(dl.data), editing);
  const { message: bobs } = await invoke(codeTool(bob), { lang: 'py', code: 'print(open("/mnt/data/skills/pptx/editing.md").read(), end="")' },
    { _injected_files: skillRefs });
  assert.equal(bobs.content.replace(/^stdout:\n/, '').trimEnd(), editing.trimEnd());
  const list = await kiln(bob, 'GET', `/files/${primed.storage_session_id}${identityQuery(skillIdentity)}&detail=normalized`);
  assert.equal(list.status, 200);
  assert.deepEqual(list.data.map((f) => f.id).sort(), primed.files.map((f) => f.fileId).sort(), 'no file added to the skill');
  assert.ok(list.data.every((f) => f.read_only === true), JSON.stringify(list.data));
});

test('carol of another tenant can neither run with the skill\'s files nor read them', async () => {
  const { error, exchanges } = await rejected(codeTool(carol), { lang: 'py', code: readSkill }, { _injected_files: skillRefs });
  const post = exchanges.find((e) => e.path === '/v1/exec');
  assert.equal(post.status, 403, JSON.stringify(post.answer));
  assert.equal(post.answer.error, 'forbidden');
  assert.match(String(error.message), /not authorized|unauthorized|403/i, 'the model is told it may not, not to retry');
  assert.doesNotMatch(String(error.message), /3000|Editing decks/);

  const ref = refNamed('skills/pptx/data/sales.csv');
  const list = await kiln(carol, 'GET', `/files/${ref.storage_session_id}${identityQuery(skillIdentity)}&detail=full`);
  assert.equal(list.status, 200);
  assert.deepEqual(list.data, []);
  for (const route of [`/download/${ref.storage_session_id}/${ref.id}`, `/sessions/${ref.storage_session_id}/objects/${ref.id}`]) {
    const res = await kiln(carol, 'GET', route + identityQuery(skillIdentity));
    assert.equal(res.status, 404, `${route}: ${JSON.stringify(res.data)}`);
  }
  const del = await kiln(carol, 'DELETE', `/sessions/${ref.storage_session_id}/objects/${ref.id}${identityQuery(skillIdentity)}`);
  assert.equal(del.status, 404);
  const still = await getCodeFileInfo(alice, ref.storage_session_id, ref.id, skillIdentity);
  assert.equal(still.res.status, 200, 'the skill file survives carol\'s delete');
});

test('runtime_session_hint: alice\'s calls share Python state; bob\'s same hint is his own runtime', async () => {
  const hint = `v2:conversation:${randomUUID().replace(/-/g, '')}`;
  const stateful = { executionProfile: 'stateful', statefulSessions: true };
  const aliceTool = codeTool(alice, { ...stateful, runtimeSessionHint: hint });

  const first = await invoke(aliceTool, {
    lang: 'py', code: 'import pandas as pd\ndf = pd.read_csv("/mnt/data/skills/pptx/data/sales.csv")\nseen = len(df)\nprint(seen)',
  }, { _injected_files: skillRefs });
  const post = first.exchanges.find((e) => e.path === '/v1/exec');
  assert.equal(post.body.runtime_session_hint, hint);
  assert.equal(post.headers['x-codeapi-expected-profile'], 'stateful');
  assert.equal(post.answerHeaders['x-codeapi-execution-profile'], 'stateful');
  assert.equal(post.answer.stdout, '3000\n', post.answer.stderr);
  const { runtime_session_id: runtime, runtime_status: status } = first.message.artifact;
  assert.equal(status, 'new');
  assert.ok(runtime, JSON.stringify(first.message.artifact));

  const second = await invoke(aliceTool, { lang: 'py', code: 'print(seen, df.region.nunique(), int(df.units.sum()))' },
    { _injected_files: skillRefs });
  const units = sales.csv.trim().split('\n').slice(1).reduce((s, l) => s + Number(l.split(',')[2]), 0);
  assert.equal(second.exchanges.find((e) => e.path === '/v1/exec').answer.stdout, `3000 4 ${units}\n`);
  assert.equal(second.message.artifact.runtime_status, 'reused');
  assert.equal(second.message.artifact.runtime_session_id, runtime);

  // Bob's tool gets the hint as ToolNode injects it; the same string names his own runtime.
  const bobs = await invoke(codeTool(bob, stateful), { lang: 'py', code: 'print(globals().get("seen"))' },
    { _runtime_session_hint: hint });
  const bobPost = bobs.exchanges.find((e) => e.path === '/v1/exec');
  assert.equal(bobPost.body.runtime_session_hint, hint);
  assert.equal(bobPost.answer.stdout, 'None\n', bobPost.answer.stderr);
  assert.equal(bobs.message.artifact.runtime_status, 'new');
  assert.notEqual(bobs.message.artifact.runtime_session_id, runtime);
});

test('the bash tool with carol\'s RS256 token, on a file she uploaded as crud.js does', async () => {
  const orders = salesCSV(2400);
  const up = await uploadCodeEnvFile(carol, {
    buffer: Buffer.from(orders.csv), filename: 'exports/orders.csv', kind: 'user', id: userId(carol),
  });
  assert.equal(up.status, 200, JSON.stringify(up.data));
  assert.equal(up.data.message, 'success');
  const ref = {
    id: up.data.files[0].fileId, resource_id: userId(carol), storage_session_id: up.data.storage_session_id,
    name: 'exports/orders.csv', kind: 'user',
  };
  const bash = createBashExecutionTool({ baseUrl: baseURL, authHeaders: await authHeaders(carol), user_id: userId(carol) });
  const { message, exchanges } = await invoke(bash, {
    command: 'awk -F, \'NR > 1 { n[$2]++; u[$2] += $3 } END { for (r in n) print r, n[r], u[r] }\' /mnt/data/exports/orders.csv | sort',
  }, { _injected_files: [ref] });
  const post = exchanges.find((e) => e.path === '/v1/exec');
  assert.equal(post.status, 200, JSON.stringify(post.answer));
  assert.equal(post.body.lang, 'bash');
  assert.equal(decode(post.headers.authorization.slice('Bearer '.length)).header.alg, 'RS256');
  const rows = orders.csv.trim().split('\n').slice(1).map((l) => l.split(','));
  const want = ['east', 'north', 'south', 'west'].map((r) => {
    const mine = rows.filter((row) => row[1] === r);
    return `${r} ${mine.length} ${mine.reduce((s, row) => s + Number(row[2]), 0)}`;
  });
  assert.deepEqual(post.answer.stdout.trim().split('\n'), want, post.answer.stderr);
  assert.match(message.content, /east 600 /);

  // Alice, of another tenant, cannot run with carol's file.
  const { exchanges: hers } = await rejected(
    createBashExecutionTool({ baseUrl: baseURL, authHeaders: await authHeaders(alice) }),
    { command: 'head -3 /mnt/data/exports/orders.csv' }, { _injected_files: [ref] });
  assert.equal(hers.find((e) => e.path === '/v1/exec').status, 403);
});

test('programmatic tool calling with bob\'s token: pandas over the skill, targets from a tool', async () => {
  const targets = { north: 2_600_000, south: 2_750_000, east: 2_900_000, west: 3_100_000 };
  const asked = [];
  const target = tool(async ({ region }) => {
    asked.push(region);
    return { region, target_cents: targets[region] };
  }, {
    name: 'get_region_target',
    description: 'The revenue target of a sales region, in cents',
    schema: { type: 'object', properties: { region: { type: 'string' } }, required: ['region'] },
  });
  const ptc = createProgrammaticToolCallingTool({ baseUrl: baseURL, authHeaders: () => authHeaders(bob) });
  const code = `import asyncio
import pandas as pd
df = pd.read_csv("/mnt/data/skills/pptx/data/sales.csv")
df["revenue"] = df.units * df.unit_price_cents
totals = df.groupby("region").revenue.sum().sort_index()
answers = await asyncio.gather(*(get_region_target(region=r) for r in totals.index))
for r, t in zip(totals.index, answers):
    print(r, "above" if totals[r] >= t["target_cents"] else "below", int(totals[r] - t["target_cents"]))
`;
  const { message, exchanges } = await invoke(ptc, { code }, {
    toolMap: new Map([[target.name, target]]),
    toolDefs: [{ name: target.name, description: target.description, parameters: target.schema, allowed_callers: ['code_execution'] }],
    session_id: primed.storage_session_id, // LibreChat's session context names the skill's storage session
    _injected_files: skillRefs,
  });
  const posts = exchanges.filter((e) => e.path === '/v1/exec/programmatic');
  assert.equal(posts.length, 2, 'one start, one continuation with the four results');
  for (const p of posts) {
    assert.equal(p.status, 200, JSON.stringify(p.answer));
    assert.equal(decode(p.headers.authorization.slice('Bearer '.length)).claims.sub, bob.user.id);
  }
  const done = posts.at(-1).answer;
  assert.equal(done.status, 'completed', JSON.stringify(done));
  const want = Object.keys(targets).sort().map((r) => {
    const diff = sales.totals[r] - targets[r];
    return `${r} ${diff >= 0 ? 'above' : 'below'} ${diff}`;
  });
  assert.deepEqual(done.stdout.trim().split('\n'), want, done.stderr);
  assert.deepEqual(asked.sort(), Object.keys(targets).sort());
  assert.notEqual(message.artifact.session_id, primed.storage_session_id, 'the run is bob\'s, not the skill\'s');
});

test('upload, freshness check, delete and 404, as crud.js and priming.ts do them', async () => {
  const notes = Buffer.from('Q3 plan\n- ship the pptx skill\n- review regional targets\n');
  const identity = { kind: 'user', id: userId(alice) };
  const up = await uploadCodeEnvFile(alice, { buffer: notes, filename: 'plans/q3.md', ...identity });
  assert.equal(up.status, 200, JSON.stringify(up.data));
  assert.equal(up.data.message, 'success');
  const sid = up.data.storage_session_id;
  const fid = up.data.files[0].fileId;
  assert.ok(sid && fid, JSON.stringify(up.data));

  const { res, info } = await getCodeFileInfo(alice, sid, fid, identity);
  assert.equal(res.status, 200, JSON.stringify(res.data));
  assert.ok(checkCodeFileActive(info.lastModified), `lastModified ${info.lastModified}`);
  assert.ok(!Number.isNaN(Date.parse(info.lastModified)));
  assert.equal(info.size, notes.length);
  assert.ok(typeof info.etag === 'string' && info.etag.length > 0, JSON.stringify(info));
  assert.equal(info.readOnly, false);

  // Bob, of the same tenant, sees nothing and deletes nothing, whatever identity he names.
  const bobs = await getCodeFileInfo(bob, sid, fid, identity);
  assert.equal(bobs.res.status, 404);
  assert.equal(bobs.info, null);
  const bobDelete = await kiln(bob, 'DELETE', `/sessions/${sid}/objects/${fid}${identityQuery(identity)}`);
  assert.equal(bobDelete.status, 404);
  assert.equal((await getCodeFileInfo(alice, sid, fid, identity)).res.status, 200, 'bob deleted alice\'s file');

  const del = await kiln(alice, 'DELETE', `/sessions/${sid}/objects/${fid}${identityQuery(identity)}`);
  assert.equal(del.status, 200, JSON.stringify(del.data));
  assert.deepEqual(del.data, { message: 'File deleted successfully', session_id: sid, fileId: fid });
  const gone = await getCodeFileInfo(alice, sid, fid, identity);
  assert.equal(gone.res.status, 404);
  assert.equal(gone.res.data.error, 'not_found');
  const again = await kiln(alice, 'DELETE', `/sessions/${sid}/objects/${fid}${identityQuery(identity)}`);
  assert.equal(again.status, 404, 'a second delete: the client retires the ref on 404');
  const download = await kiln(alice, 'GET', `/download/${sid}/${fid}${identityQuery(identity)}`);
  assert.equal(download.status, 404);
  // The name as uploaded, its directory too: LibreChat matches it against its own.
  assert.equal(info.originalFilename, 'plans/q3.md');
  assert.equal(up.data.files[0].filename, 'plans/q3.md');
});
