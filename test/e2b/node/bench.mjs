// The E2B rows of `make bench` (test/bench/e2b.go), through E2B's SDK against a kiln whose
// URL is in E2B_API_URL and E2B_SANDBOX_URL: prints one "<row> <ms>" line per timed step.
//   node bench.mjs create N HEALTH_URL   Sandbox.create() to run('echo hi')'s first output,
//                                        each create with the pool full (HEALTH_URL says)
//   node bench.mjs run N                 commands.run('true') in one held sandbox
//   node bench.mjs files N MB            files.write then files.read of MB megabytes
import { Sandbox } from 'e2b'

const [mode, n, arg] = process.argv.slice(2)
const count = Number(n)
const now = () => performance.now()

async function poolFull(url) {
  for (;;) {
    const h = await (await fetch(url)).json()
    if (h.pool && h.pool.ready >= h.pool.target && h.pool.warming === 0) return
    await new Promise((r) => setTimeout(r, 100))
  }
}

async function firstOutput(sbx) {
  let first
  await sbx.commands.run('echo hi', { onStdout: () => { first ??= now() } })
  return first
}

if (mode === 'create') {
  // One untimed round first: the SDK's module, its connections and the JIT warm up.
  await poolFull(arg)
  const warm = await Sandbox.create()
  await firstOutput(warm)
  await warm.kill()
  for (let i = 0; i < count; i++) {
    await poolFull(arg)
    const t0 = now()
    const sbx = await Sandbox.create()
    const first = await firstOutput(sbx)
    console.log(`create ${(first - t0).toFixed(3)}`)
    await sbx.kill()
  }
} else if (mode === 'run') {
  const sbx = await Sandbox.create()
  try {
    for (let i = 0; i < 3; i++) await sbx.commands.run('true')
    for (let i = 0; i < count; i++) {
      const t0 = now()
      await sbx.commands.run('true')
      console.log(`run ${(now() - t0).toFixed(3)}`)
    }
  } finally {
    await sbx.kill()
  }
} else if (mode === 'files') {
  const size = Number(arg) << 20
  const data = new Uint8Array(size)
  for (let i = 0; i < size; i += 4096) data[i] = i & 0xff
  const sbx = await Sandbox.create()
  try {
    await sbx.files.write('warm.bin', data.subarray(0, 1 << 20))
    for (let i = 0; i < count; i++) {
      let t0 = now()
      await sbx.files.write('big.bin', data)
      console.log(`write ${(now() - t0).toFixed(3)}`)
      t0 = now()
      const back = await sbx.files.read('big.bin', { format: 'bytes' })
      console.log(`read ${(now() - t0).toFixed(3)}`)
      if (back.length !== size) throw new Error(`read ${back.length} bytes, wrote ${size}`)
    }
  } finally {
    await sbx.kill()
  }
} else {
  console.error(`unknown mode ${mode}`)
  process.exit(2)
}
