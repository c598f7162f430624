// Times small cells through a Jupyter server's kernel, as a notebook sends them: for the
// benchmark (test/bench/jupyter.go), the same client against kiln and against a Jupyter
// Server + ipykernel. Prints one line per cell, "cell <milliseconds>", from the
// execute_request sent to its reply and idle status.
//
// usage: node cells.mjs BASE_URL TOKEN CELLS
import WebSocket from 'ws';
import { KernelManager, ServerConnection } from '@jupyterlab/services';

const [base, token, count] = process.argv.slice(2);
const settings = ServerConnection.makeSettings({
  baseUrl: base.replace(/\/?$/, '/'),
  wsUrl: base.replace(/^http/, 'ws').replace(/\/?$/, '/'),
  token,
  appendToken: true,
  WebSocket,
});
const km = new KernelManager({ serverSettings: settings });
await km.ready;
const kernel = await km.startNew({ name: 'python3' });
await kernel.info;
const run = async (code) => {
  const reply = await kernel.requestExecute({ code }).done;
  if (reply.content.status !== 'ok') throw new Error(`${code}: ${JSON.stringify(reply.content)}`);
};
await run('x = 0'); // the kernel's first cell, its sandbox taken, is not timed
for (let i = 0; i < Number(count); i++) {
  const start = performance.now();
  await run('x += 1');
  console.log(`cell ${(performance.now() - start).toFixed(3)}`);
}
await kernel.shutdown();
km.dispose();
process.exit(0);
