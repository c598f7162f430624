// E2B's own JS SDK, unchanged, against kiln: E2B_API_URL and E2B_SANDBOX_URL name kiln,
// E2B_API_KEY is one of its keys (test/e2b runs this; KILN_OTHER_KEY is another caller's).
import { test as nodeTest } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, NotFoundError, FileNotFoundError, FileType, FilesystemEventType, TimeoutError } from 'e2b'
import * as Oldest from 'e2b-oldest'

// A test that hangs fails on its own, naming itself, rather than stalling the run.
const test = (name, fn) => nodeTest(name, { timeout: 120_000 }, fn)

const other = { apiKey: process.env.KILN_OTHER_KEY }
const text = new TextDecoder()

async function withSandbox(opts, fn) {
  const sbx = await Sandbox.create(opts)
  try {
    return await fn(sbx)
  } finally {
    await sbx.kill().catch(() => {})
  }
}

test('a command runs in the home directory and answers with its output', async () => {
  await withSandbox({ metadata: { suite: 'kiln' } }, async (sbx) => {
    assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
    const r = await sbx.commands.run('echo hi; pwd; echo "$HOME"')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'hi\n/home/user\n/home/user\n')
    assert.equal(r.stderr, '')
    const tools = await sbx.commands.run('git --version && curl --version | head -n 1 && python3 --version && bash --version | head -n 1')
    assert.match(tools.stdout, /git version/)
    assert.match(tools.stdout, /curl \d/)
    assert.match(tools.stdout, /Python 3/)
  })
})

test('env, cwd, stderr and the exit code reach the caller', async () => {
  await withSandbox({ envs: { FROM_CREATE: 'c' } }, async (sbx) => {
    const r = await sbx.commands.run('echo "$FROM_CREATE $GREETING"; pwd', { envs: { GREETING: 'hello' }, cwd: '/tmp' })
    assert.equal(r.stdout, 'c hello\n/tmp\n')
    await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, String(err))
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'oops\n')
      return true
    })
    await assert.rejects(sbx.commands.run('no-such-command-here'), (err) => {
      assert.ok(err instanceof CommandExitError, String(err))
      assert.equal(err.exitCode, 127)
      assert.match(err.stderr, /not found/)
      return true
    })
  })
})

test('output streams as it comes, and a background command is listed, fed and killed', async () => {
  await withSandbox({}, async (sbx) => {
    const seen = []
    const started = Date.now()
    await sbx.commands.run('echo first; sleep 1.5; echo second', {
      onStdout: (d) => seen.push([d, Date.now() - started]),
    })
    assert.deepEqual(seen.map(([d]) => d), ['first\n', 'second\n'])
    assert.ok(seen[1][1] - seen[0][1] >= 1000, `first came ${seen[0][1]} ms, second ${seen[1][1]} ms after the start`)

    const cat = await sbx.commands.run('cat', { background: true, stdin: true })
    await sbx.commands.sendStdin(cat.pid, 'fed through stdin\n')
    await sbx.commands.closeStdin(cat.pid)
    const fed = await cat.wait()
    assert.equal(fed.stdout, 'fed through stdin\n')

    const sleeper = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === sleeper.pid && p.cmd === '/bin/bash'), JSON.stringify(listed))
    assert.equal(await sbx.commands.kill(sleeper.pid), true)
    await assert.rejects(sleeper.wait(), (err) => err instanceof CommandExitError && err.exitCode === -1)
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
  })
})

test('a command is killed at its timeout', async () => {
  await withSandbox({}, async (sbx) => {
    const t0 = Date.now()
    await assert.rejects(sbx.commands.run('sleep 29.5', { timeoutMs: 1500 }))
    assert.ok(Date.now() - t0 < 10000)
    // The client gives up at its deadline; kiln kills at the same deadline, as it read it
    // from the request, so the process may outlive the rejection by a moment.
    // Exactly its command line: a Pod has a "sleep infinity" of its own.
    const r = await sbx.commands.run("for i in $(seq 50); do pgrep -fx 'sleep 29.5' || { echo none; break; }; sleep 0.1; done")
    const ps = await sbx.commands.run('ps -eo pid,ppid,pgid,sid,stat,args')
    assert.match(r.stdout, /none\n$/, ps.stdout)
  })
})

test('a terminal is a real PTY that takes input and a resize', async () => {
  await withSandbox({}, async (sbx) => {
    let out = ''
    const pty = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => { out += text.decode(d) }, timeoutMs: 0 })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo $((6*7)); tty\n'))
    await waitFor(() => /30 100/.test(out) && /\b42\b/.test(out) && /\/dev\/pts\//.test(out), () => out)
    await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit\n'))
    const end = await pty.wait()
    assert.equal(end.exitCode, 0)
    assert.match(out, /40 120/)
  })
})

test('files are written, read, listed, moved and removed, as text and bytes', async () => {
  await withSandbox({}, async (sbx) => {
    const info = await sbx.files.write('notes/a.txt', 'hello from the SDK')
    assert.equal(info.path, '/home/user/notes/a.txt')
    assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello from the SDK')
    assert.equal((await sbx.commands.run('cat notes/a.txt')).stdout, 'hello from the SDK')

    const big = new Uint8Array(6 << 20)
    for (let i = 0; i < big.length; i += 1) big[i] = (i * 31 + (i >> 12)) & 0xff
    await sbx.files.write('/home/user/big.bin', big.buffer)
    const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' })
    assert.equal(back.length, big.length)
    assert.ok(Buffer.from(back).equals(Buffer.from(big)))
    assert.equal((await sbx.commands.run('sha256sum big.bin | cut -c1-64')).stdout.trim(),
      (await import('node:crypto')).createHash('sha256').update(big).digest('hex'))

    const many = await sbx.files.write([{ path: 'w/one.txt', data: '1' }, { path: '/tmp/two.txt', data: '22' }])
    assert.deepEqual(many.map((f) => f.path).sort(), ['/home/user/w/one.txt', '/tmp/two.txt'])

    const entries = await sbx.files.list('/home/user')
    const names = entries.map((e) => e.name)
    for (const n of ['notes', 'big.bin', 'w']) assert.ok(names.includes(n), names.join(','))
    assert.equal(entries.find((e) => e.name === 'notes').type, FileType.DIR)
    assert.equal(entries.find((e) => e.name === 'big.bin').size, big.length)
    const deep = await sbx.files.list('/home/user', { depth: 2 })
    assert.ok(deep.some((e) => e.path === '/home/user/notes/a.txt'))

    assert.equal(await sbx.files.makeDir('made/here'), true)
    assert.equal(await sbx.files.makeDir('made/here'), false)
    const moved = await sbx.files.rename('notes/a.txt', 'made/here/b.txt')
    assert.equal(moved.path, '/home/user/made/here/b.txt')
    assert.equal(await sbx.files.exists('notes/a.txt'), false)
    assert.equal(await sbx.files.exists('made/here/b.txt'), true)
    const stat = await sbx.files.getInfo('made/here/b.txt')
    assert.equal(stat.size, 'hello from the SDK'.length)
    assert.equal(stat.type, FileType.FILE)
    await sbx.files.remove('made')
    assert.equal(await sbx.files.exists('made'), false)

    await assert.rejects(sbx.files.read('/no/such/file'), (err) => err instanceof NotFoundError || /not found/i.test(String(err)))
    await assert.rejects(sbx.files.write('/etc/kiln-was-here', 'x'))
    await assert.rejects(sbx.files.list('/no/such/dir'), (err) => err instanceof NotFoundError || /not found|does not exist/i.test(String(err)))
  })
})

test('files keep metadata, travel gzipped, and are the user\'s; a watch sees each change', async () => {
  await withSandbox({}, async (sbx) => {
    const info = await sbx.files.write('m.txt', 'with metadata', { metadata: { author: 'ada' } })
    assert.deepEqual(info.metadata, { author: 'ada' })
    const stat = await sbx.files.getInfo('m.txt')
    assert.deepEqual(stat.metadata, { author: 'ada' })
    assert.equal(stat.owner, 'user')
    assert.equal((await sbx.files.write('m.txt', 'overwritten')).metadata, undefined)

    await sbx.files.write('z.txt', 'zipped both ways', { gzip: true })
    assert.equal(await sbx.files.read('z.txt', { gzip: true }), 'zipped both ways')
    assert.equal(await sbx.files.read('z.txt'), 'zipped both ways')

    await sbx.commands.run('ln -s /home/user/z.txt link')
    assert.equal((await sbx.files.getInfo('link')).symlinkTarget, '/home/user/z.txt')
    await sbx.files.remove('never-was.txt')

    await sbx.files.makeDir('watched/deep')
    const seen = []
    let wake
    const handle = await sbx.files.watchDir('watched', (e) => { seen.push(e); wake?.() }, { recursive: true, includeEntry: true })
    await sbx.files.write('watched/deep/f.txt', 'one')
    while (!seen.some((e) => e.type === FilesystemEventType.WRITE && e.name === 'deep/f.txt')) {
      await new Promise((r) => { wake = r; setTimeout(r, 5000) })
    }
    const write = seen.find((e) => e.type === FilesystemEventType.WRITE && e.name === 'deep/f.txt')
    assert.equal(write.entry?.path, '/home/user/watched/deep/f.txt')
    await handle.stop()
    await assert.rejects(sbx.files.watchDir('no-such-dir', () => {}), FileNotFoundError)
  })
})

test('real data crosses both ways: a DataFrame\'s CSV in, an array and a fitted model out', async () => {
  await withSandbox({}, async (sbx) => {
    const rows = ['x,y']
    for (let i = 0; i < 50_000; i += 1) rows.push(`${i},${2 * i + 1}`)
    const csv = rows.join('\n') + '\n'
    assert.ok(csv.length > 64 << 10)
    await sbx.files.write('data/points.csv', csv, { gzip: true, metadata: { source: 'node' } })
    const fit = await sbx.commands.run(`python3 -c "
import pickle, numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression
df = pd.read_csv('data/points.csv')
model = LinearRegression().fit(df[['x']], df['y'])
np.save('data/coef.npy', np.arange(20_000, dtype='float64') * model.coef_[0])
pickle.dump(model, open('data/model.pkl', 'wb'))
print(len(df), round(float(model.coef_[0]), 6), round(float(model.intercept_), 6))"`)
    assert.equal(fit.stdout, '50000 2.0 1.0\n')
    const npy = Buffer.from(await sbx.files.read('data/coef.npy', { format: 'bytes', gzip: true }))
    assert.equal(npy.subarray(1, 6).toString(), 'NUMPY')
    assert.ok(npy.length > 20_000 * 8, `${npy.length} bytes`)
    assert.ok(Math.abs(npy.readDoubleLE(npy.length - 8) - 19_999 * 2) < 1e-6, 'the array\'s last value')
    const model = await sbx.files.read('data/model.pkl', { format: 'bytes' })
    assert.equal((await sbx.files.getInfo('data/points.csv')).metadata?.source, 'node')
    // The model read out goes back in as it came, and still predicts.
    await sbx.files.write('data/again.pkl', model.buffer)
    const again = await sbx.commands.run(`python3 -c "
import pickle; print(pickle.load(open('data/again.pkl', 'rb')).predict([[10]])[0].round(6))"`)
    assert.equal(again.stdout, '21.0\n')
  })
})

test('a gzip bomb fills only its own sandbox\'s disk, and a killed sandbox\'s URLs are refused', async () => {
  const zlib = await import('node:zlib')
  await withSandbox({}, async (sbx) => {
    // 1 GiB of zeros in about 1 MB: the upload stops where the sandbox's data disk ends.
    const bomb = zlib.gzipSync(Buffer.alloc(1 << 30), { level: 9 })
    assert.ok(bomb.length < 2 << 20)
    const put = await fetch(await sbx.uploadUrl('bomb.bin'), {
      method: 'POST', body: bomb, headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
    })
    assert.equal(put.status, 507, await put.text())
    await sbx.files.remove('bomb.bin')
    assert.equal((await sbx.commands.run('echo still here')).stdout, 'still here\n')

    const down = await sbx.downloadUrl('gone.txt')
    await sbx.files.write('gone.txt', 'x')
    assert.equal((await fetch(down)).status, 200)
    await sbx.kill()
    assert.equal((await fetch(down)).status, 401)
  })
})

test('a command whose sandbox is killed under it says the sandbox ended', async () => {
  const sbx = await Sandbox.create()
  const cmd = await sbx.commands.run('sleep 60', { background: true })
  await sbx.kill()
  const err = await cmd.wait().catch((e) => e)
  assert.ok(err instanceof TimeoutError, String(err))
  assert.match(err.message, /sandbox was killed or reached its end of life/)
})

test('the control plane: list, info, metrics, timeout, connect and kill, each the owner\'s alone', async () => {
  const tag = `t${Date.now()}`
  const sbx = await Sandbox.create({ metadata: { tag } })
  try {
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.deepEqual(info.metadata, { tag })
    assert.equal(info.state, 'running')

    const page = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
    // Newest first unless asked, a page at a time, filtered by template and start.
    const second = await Sandbox.create({ metadata: { tag } })
    try {
      const pages = Sandbox.list({ limit: 1, query: { metadata: { tag } } })
      assert.deepEqual((await pages.nextItems()).map((s) => s.sandboxId), [second.sandboxId])
      assert.equal(pages.hasNext, true)
      assert.deepEqual((await pages.nextItems()).map((s) => s.sandboxId), [sbx.sandboxId])
      const asc = await Sandbox.list({ order: 'asc', query: { metadata: { tag } } }).nextItems()
      assert.deepEqual(asc.map((s) => s.sandboxId), [sbx.sandboxId, second.sandboxId])
      assert.deepEqual(await Sandbox.list({ query: { metadata: { tag }, template: 'other' } }).nextItems(), [])
      const after = await Sandbox.list({ query: { metadata: { tag }, startedAfter: (await second.getInfo()).startedAt } }).nextItems()
      assert.deepEqual(after.map((s) => s.sandboxId), [second.sandboxId])
    } finally {
      await second.kill()
    }
    assert.deepEqual(await Sandbox.list({ ...other, query: { metadata: { tag } } }).nextItems(), [])
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, other), (err) => err instanceof NotFoundError || /not found/i.test(String(err)))
    await assert.rejects(Sandbox.kill(sbx.sandboxId, other).then((ok) => { if (!ok) throw new Error('not found') }))

    const metrics = await sbx.getMetrics()
    assert.ok(metrics.length >= 1)
    assert.ok(metrics[0].memTotal > 0 && metrics[0].diskTotal > 0, JSON.stringify(metrics))
    const hourAgo = Date.now() - 3_600_000
    assert.deepEqual(await sbx.getMetrics({ start: new Date(hourAgo), end: new Date(hourAgo + 60_000) }), [])

    await sbx.setTimeout(120_000)
    const later = await sbx.getInfo()
    const left = later.endAt.getTime() - Date.now()
    assert.ok(left > 100_000 && left <= 121_000, `ends in ${left} ms`)

    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')
    assert.equal(await sbx.isRunning(), true)
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('echo gone'))
  await assert.rejects(Sandbox.connect(sbx.sandboxId), (err) => err instanceof NotFoundError || /not found/i.test(String(err)))
})

test('a sandbox ends at its timeout, and an unknown template is E2B\'s 404', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 2000 })
  assert.equal(await sbx.isRunning(), true)
  await new Promise((r) => setTimeout(r, 3500))
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.create('no-such-template'), /not found/i)
})

test('signed file URLs carry their own credential, and a forged one is refused', async () => {
  await withSandbox({}, async (sbx) => {
    await sbx.files.write('signed.txt', 'by signature')
    // Opened as a browser would: no header names the sandbox, the signature does.
    const down = await sbx.downloadUrl('signed.txt', { useSignatureExpiration: 60_000 })
    assert.match(down, /signature=v1_/)
    const got = await fetch(down)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'by signature')
    const forged = new URL(down)
    forged.searchParams.set('path', 'other.txt')
    assert.equal((await fetch(forged)).status, 401)
    const bare = new URL(down)
    bare.search = '?path=signed.txt'
    const box = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
    assert.equal((await fetch(bare, { headers: box })).status, 401)
    const expired = await fetch(await sbx.downloadUrl('signed.txt', { useSignatureExpiration: -10_000 }))
    assert.equal(expired.status, 401)
    assert.deepEqual(await expired.json(), { code: 401, message: 'signature is already expired' })

    const up = await sbx.uploadUrl('up/via-url.txt')
    const form = new FormData()
    form.append('file', new Blob(['uploaded by URL']), 'via-url.txt')
    const put = await fetch(up, { method: 'POST', body: form })
    assert.equal(put.status, 200, await put.text())
    assert.equal(await sbx.files.read('up/via-url.txt'), 'uploaded by URL')
  })
})

test('commands reach out only as kiln\'s egress policy allows, which the sandbox\'s settings narrow', async () => {
  const up = new URL(process.env.KILN_UPSTREAM)
  const also = `http://also.test:${up.port}/`
  const other = `http://other.test:${up.port}/`
  // kiln's proxy answers 403 for a host outside the policy; with no proxy, nothing answers.
  const denied = /^egress denied: |^refused/
  const fetchIn = (sbx, url) => sbx.commands.run(`curl -sS -m 10 ${url}`).then((r) => r.stdout, (err) => `refused: ${err.stderr ?? err}`)
  await withSandbox({}, async (sbx) => {
    assert.equal(await fetchIn(sbx, up.href), 'hello from upstream')
    assert.match(await fetchIn(sbx, other), denied) // not in the policy
    // Still there after cells and calls in between: the sandbox's egress lasts its life.
    await new Promise((r) => setTimeout(r, 1000))
    assert.equal(await fetchIn(sbx, also), 'hello from upstream')
  })
  await withSandbox({ network: { allowOut: [`allowed.test:${up.port}`] } }, async (sbx) => {
    assert.equal(await fetchIn(sbx, up.href), 'hello from upstream')
    assert.match(await fetchIn(sbx, also), denied) // allowed by kiln, not by the sandbox
  })
  await withSandbox({ network: { allowOut: [`other.test:${up.port}`] } }, async (sbx) => {
    assert.match(await fetchIn(sbx, other), denied) // a sandbox cannot widen the policy
  })
  await withSandbox({ allowInternetAccess: false }, async (sbx) => {
    assert.match(await fetchIn(sbx, up.href), denied)
  })
})

test('a caller holds at most E2B_MAX_SANDBOXES_PER_CALLER sandboxes, even when it asks for them at once', async () => {
  const tries = await Promise.allSettled([1, 2, 3, 4].map(() => Sandbox.create()))
  const made = tries.filter((t) => t.status === 'fulfilled').map((t) => t.value)
  const refused = tries.filter((t) => t.status === 'rejected').map((t) => t.reason)
  try {
    assert.equal(made.length, 3, String(refused))
    assert.equal(refused.length, 1)
    assert.match(String(refused[0]), /E2B_MAX_SANDBOXES_PER_CALLER/)
    const mine = await Sandbox.create(other) // another caller has places of its own
    await mine.kill()
  } finally {
    await Promise.all(made.map((s) => s.kill()))
  }
  await withSandbox({}, async (sbx) => assert.equal(await sbx.isRunning(), true)) // a place again
})

test('the oldest SDK kiln supports creates, runs, moves files and kills', async () => {
  const sbx = await Oldest.Sandbox.create()
  try {
    assert.equal((await sbx.commands.run('echo old')).stdout, 'old\n')
    await sbx.files.write('/home/user/old.txt', 'from an old SDK')
    assert.equal(await sbx.files.read('old.txt'), 'from an old SDK')
  } finally {
    await sbx.kill()
  }
})

async function waitFor(ok, what, ms = 10000) {
  const until = Date.now() + ms
  while (!ok()) {
    if (Date.now() > until) throw new Error(`timed out waiting; saw: ${what()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
