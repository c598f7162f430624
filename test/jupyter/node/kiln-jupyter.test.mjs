// kiln's Jupyter Server API driven by JupyterLab's own client library,
// @jupyterlab/services: kernel specs, kernels started, executed in, interrupted,
// restarted and shut down over their WebSocket, as JupyterLab does. The Go test in
// test/jupyter starts kiln and runs this with node --test, with KILN_URL, KILN_API_KEY
// and KILN_OTHER_KEY (another caller's key) set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { KernelAPI, KernelManager, KernelSpecAPI, ServerConnection } from '@jupyterlab/services';

const url = process.env.KILN_URL;
const key = process.env.KILN_API_KEY;
const otherKey = process.env.KILN_OTHER_KEY;
assert.ok(url && key && otherKey, 'KILN_URL, KILN_API_KEY and KILN_OTHER_KEY must be set');

function settings(token) {
  return ServerConnection.makeSettings({
    baseUrl: url + '/jupyter/',
    wsUrl: url.replace(/^http/, 'ws') + '/jupyter/',
    token,
    appendToken: true,
    WebSocket,
  });
}

const mine = settings(key);
const theirs = settings(otherKey);

// run executes code and collects what the kernel said of it on IOPub, and its reply.
async function run(kernel, code) {
  const iopub = [];
  const future = kernel.requestExecute({ code });
  future.onIOPub = (msg) => iopub.push(msg);
  const reply = await future.done;
  const of = (type) => iopub.filter((m) => m.header.msg_type === type);
  return { reply: reply.content, iopub, of };
}

test('kernel specs name python3 as the default', async () => {
  const specs = await KernelSpecAPI.getSpecs(mine);
  assert.equal(specs.default, 'python3');
  assert.equal(specs.kernelspecs.python3.language, 'python');
});

test('a kernel runs cells and shows what a notebook shows', async (t) => {
  const km = new KernelManager({ serverSettings: mine });
  await km.ready;
  const kernel = await km.startNew({ name: 'python3' });
  t.after(async () => { km.dispose(); });

  const info = await kernel.info;
  assert.equal(info.language_info.name, 'python');
  assert.equal(info.protocol_version, '5.3');

  let r = await run(kernel, 'x = 6 * 7\nprint("hello")\nx');
  assert.equal(r.reply.status, 'ok');
  assert.equal(r.reply.execution_count, 1);
  assert.deepEqual(r.of('status').map((m) => m.content.execution_state), ['busy', 'idle']);
  assert.equal(r.of('execute_input')[0].content.code, 'x = 6 * 7\nprint("hello")\nx');
  assert.deepEqual(r.of('stream').map((m) => [m.content.name, m.content.text]), [['stdout', 'hello\n']]);
  const result = r.of('execute_result')[0].content;
  assert.equal(result.data['text/plain'], '42');
  assert.equal(result.execution_count, 1);

  r = await run(kernel, [
    'import numpy as np, pandas as pd',
    'from IPython.display import display, HTML, Markdown',
    'rng = np.random.default_rng(3)',
    'df = pd.DataFrame({"city": rng.choice(["Oslo", "Lima", "Pune"], 2000), "temp": rng.normal(15, 8, 2000).round(2)})',
    'display(HTML("<b>report</b>"), Markdown("# Temperatures"))',
    'plt.plot(df.temp.rolling(50).mean())',
    'plt.show()',
    'df.groupby("city").temp.describe()',
  ].join('\n'));
  assert.equal(r.reply.status, 'ok', JSON.stringify(r.reply));
  const shown = r.of('display_data').map((m) => m.content.data);
  assert.equal(shown[0]['text/html'], '<b>report</b>');
  assert.equal(shown[1]['text/markdown'], '# Temperatures');
  assert.ok(Buffer.from(shown[2]['image/png'], 'base64').subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])), 'the figure is a PNG');
  const table = r.of('execute_result')[0].content;
  assert.match(table.data['text/html'], /<table/);
  assert.match(table.data['text/html'], /Lima/);
  assert.equal(table.execution_count, 2);

  r = await run(kernel, 'y = 1\n1/0');
  assert.equal(r.reply.status, 'error');
  assert.equal(r.reply.ename, 'ZeroDivisionError');
  assert.equal(r.reply.evalue, 'division by zero');
  const error = r.of('error')[0].content;
  assert.equal(error.ename, 'ZeroDivisionError');
  assert.ok(error.traceback.some((line) => line.includes('1/0')), JSON.stringify(error.traceback));
  assert.ok(!r.of('stream').some((m) => m.content.text.includes('Traceback')), 'the traceback is not output a second time');

  r = await run(kernel, 'name = input("name? ")');
  assert.equal(r.reply.status, 'error');
  assert.match(r.reply.evalue, /input/);

  // An interrupt ends the cell and keeps what it bound (notebook semantics).
  const sleeping = run(kernel, 'import time\nz = 5\ntime.sleep(60)');
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await kernel.interrupt();
  r = await sleeping;
  assert.equal(r.reply.status, 'error');
  assert.equal(r.reply.ename, 'KeyboardInterrupt');
  r = await run(kernel, 'y + z');
  assert.equal(r.of('execute_result')[0].content.data['text/plain'], '6');

  // Cells in IPython's language, as a notebook's: magics, shell escapes, help.
  r = await run(kernel, '%matplotlib inline\n%time total = sum(range(1000))');
  assert.equal(r.reply.status, 'ok', JSON.stringify(r.reply));
  assert.match(r.of('stream').map((m) => m.content.text).join(''), /Wall time/);
  r = await run(kernel, '!echo from the shell\nlisting = !ls /\nlen(listing) > 3, total');
  assert.match(r.of('stream').map((m) => m.content.text).join(''), /from the shell/);
  assert.equal(r.of('execute_result')[0].content.data['text/plain'], '(True, 499500)');
  r = await run(kernel, '%%writefile helper.py\nVALUE = 7\n');
  assert.equal(r.reply.status, 'ok', JSON.stringify(r.reply));
  r = await run(kernel, 'import helper\nhelper.VALUE');
  assert.equal(r.of('execute_result')[0].content.data['text/plain'], '7');
  r = await run(kernel, 'len?');
  assert.match(r.of('stream').map((m) => m.content.text).join(''), /Return the number of items/);

  // Completion, help and whether a cell is complete: IPython's completer and inspector on
  // the kernel's namespace, as ipykernel answers them.
  const modules = (await kernel.requestComplete({ code: 'import nump', cursor_pos: 11 })).content;
  assert.ok(modules.matches.includes('numpy'), JSON.stringify(modules.matches));
  assert.equal(modules.cursor_start, 7);
  const completion = (await kernel.requestComplete({ code: 'import math\nmath.sq', cursor_pos: 19 })).content;
  assert.equal(completion.status, 'ok');
  assert.ok(completion.matches.includes('sqrt'), JSON.stringify(completion.matches));
  assert.equal(completion.cursor_start, 17);
  const mine2 = (await kernel.requestComplete({ code: 'd', cursor_pos: 1 })).content;
  assert.ok(mine2.matches.includes('df'), 'the names the cells bound complete');
  const help = (await kernel.requestInspect({ code: 'df.groupby', cursor_pos: 10, detail_level: 0 })).content;
  assert.equal(help.found, true);
  assert.match(help.data['text/plain'], /Signature:/);
  assert.equal((await kernel.requestIsComplete({ code: 'for i in range(3):' })).content.status, 'incomplete');
  assert.equal((await kernel.requestIsComplete({ code: 'print(1)' })).content.status, 'complete');

  // A second connection to the same kernel sees the same namespace.
  const second = km.connectTo({ model: { id: kernel.id, name: kernel.name } });
  r = await run(second, 'y + 100');
  assert.equal(r.of('execute_result')[0].content.data['text/plain'], '101');
  second.dispose();

  // Another caller neither lists nor reaches it.
  const listed = await KernelAPI.listRunning(theirs);
  assert.ok(!listed.some((k) => k.id === kernel.id), 'another caller lists the kernel');
  assert.equal(await KernelAPI.getKernelModel(kernel.id, theirs), undefined);
  await assert.rejects(KernelAPI.interruptKernel(kernel.id, theirs));
  assert.ok((await KernelAPI.listRunning(mine)).some((k) => k.id === kernel.id));

  // A restart empties the namespace; a shutdown ends the kernel.
  await kernel.restart();
  r = await run(kernel, 'y');
  assert.equal(r.reply.status, 'error');
  assert.equal(r.reply.ename, 'NameError');
  await kernel.shutdown();
  assert.ok(!(await KernelAPI.listRunning(mine)).some((k) => k.id === kernel.id));
  assert.equal(await KernelAPI.getKernelModel(kernel.id, mine), undefined);
});
